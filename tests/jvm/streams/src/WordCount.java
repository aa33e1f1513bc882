import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The word count of Kafka's own quickstart, for tests/integration/test_kafka_streams.py: lines from the input
 * topic split into words, re-keyed by word (a repartition topic), counted in a state store (its changelog
 * topic) and every new count written to the output topic.
 *
 * Arguments: bootstrap servers, application id, input topic, output topic, processing guarantee
 * (exactly_once_v2 or at_least_once), state directory, replication factor of the internal topics.
 * The process prints one line per state change ("STATE RUNNING", ...) and "ERROR <exception>" for an
 * uncaught exception, on stdout; it closes the application when stdin closes or says "stop".
 */
public final class WordCount {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[4]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[5]);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, Integer.parseInt(args[6]));
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> lines = builder.stream(args[2]);
        lines.flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
             .filter((key, word) -> !word.isEmpty())
             .groupBy((key, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
             .count()
             .toStream()
             .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
        });
        streams.setUncaughtExceptionHandler(exception -> {
            System.out.println("ERROR " + exception.toString().replace('\n', ' '));
            System.out.flush();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.start();
        Thread stdin = new Thread(() -> {
            try {
                java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
                    // nothing else is asked of it
                }
            } catch (java.io.IOException ignored) {
                // stdin gone: stop
            }
            done.countDown();
        });
        stdin.setDaemon(true);
        stdin.start();
        done.await();
        streams.close(Duration.ofSeconds(30));
        System.out.println("CLOSED");
        System.out.flush();
    }
}
