import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A Kafka Streams application for tests/integration/test_kafka_streams.py, one per process (the test kills
 * nodes under it, not it):
 *
 *   java StreamsApp MODE BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR [key=value ...]
 *
 * MODE wordcount: lines of words -> (word, running count) in OUTPUT, at_least_once (Kafka's WordCountDemo
 * shape: flatMapValues, groupBy through a repartition topic, count into a changelogged store).
 * MODE eos: exactly_once_v2: every input record (key, "n") is copied to OUTPUT as (key, "n") and counted per
 * key into OUTPUT + "-counts" (key, running count): each input must show up exactly once in the first and
 * the last count per key must equal the number of inputs for it.
 *
 * It prints one line per state change ("state RUNNING") and "error ..." for an uncaught exception (the
 * thread is then replaced, Streams' REPLACE_THREAD), and closes cleanly when stdin closes.
 */
public final class StreamsApp {
    public static void main(String[] argv) throws Exception {
        String mode = argv[0];
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, argv[1]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, argv[2]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, argv[5]);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
              mode.equals("eos") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        for (String kv : Arrays.copyOfRange(argv, 6, argv.length)) {
            int eq = kv.indexOf('=');
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        String input = argv[3];
        String output = argv[4];
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> source = builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        if (mode.equals("wordcount")) {
            source.flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                  .filter((k, word) -> !word.isEmpty())
                  .groupBy((k, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
                  .count(Materialized.as("word-counts"))
                  .toStream()
                  .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        } else {
            source.to(output, Produced.with(Serdes.String(), Serdes.String()));
            source.groupByKey()
                  .count(Materialized.as("key-counts"))
                  .toStream()
                  .to(output + "-counts", Produced.with(Serdes.String(), Serdes.Long()));
        }
        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setStateListener((now, before) -> System.out.println("state " + now));
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("error " + e.toString().replace('\n', ' '));
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        CountDownLatch stopped = new CountDownLatch(1);
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                while (in.readLine() != null) { }
            } catch (Exception ignored) { }
            stopped.countDown();
        });
        stdin.setDaemon(true);
        stdin.start();
        streams.start();
        stopped.await();
        streams.close(Duration.ofSeconds(20));
        System.out.println("closed");
    }
}
