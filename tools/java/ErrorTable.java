import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.protocol.Errors;

/**
 * Prints Kafka's error table, one line per code: code, name, retriable, description, tab-separated.
 *
 * The same values the protocol guide's error table is generated from (Errors.toHtml): the retriable flag is
 * whether the error's exception is a RetriableException, the description its exception's message.
 */
public class ErrorTable {
    public static void main(String[] args) {
        for (Errors error : Errors.values()) {
            Exception exception = error.exception();
            String description = exception == null || exception.getMessage() == null ? "" : exception.getMessage();
            System.out.println(error.code() + "\t" + error.name() + "\t"
                + (exception instanceof RetriableException ? "True" : "False") + "\t"
                + description.replace('\t', ' ').replace('\n', ' '));
        }
    }
}
