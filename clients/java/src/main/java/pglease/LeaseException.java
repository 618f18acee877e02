package pglease;

/** The lease was not acquired, or has been lost. */
public class LeaseException extends Exception {
    private static final long serialVersionUID = 1L;

    LeaseException(String message) {
        super(message);
    }
}
