package pglease;

/** Another owner held the lease for the whole wait. */
public class NotAcquiredException extends LeaseException {
    private static final long serialVersionUID = 1L;

    NotAcquiredException(String name) {
        super("lease \"" + name + "\" not acquired: another owner holds it");
    }
}
