package pglease;

/** The lease can no longer be trusted: a heartbeat was refused, or none succeeded in time. */
public class LeaseLostException extends LeaseException {
    private static final long serialVersionUID = 1L;

    LeaseLostException(String name, String reason) {
        super("lease \"" + name + "\" lost: " + reason);
    }
}
