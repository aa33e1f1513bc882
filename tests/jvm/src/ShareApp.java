import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * One KafkaShareConsumer (KIP-932) as its own process, the JVM side of
 * tests/integration/test_java_share_consumer.py. Settings are key=value arguments: bootstrap, group, topic,
 * client (its client.id), mode (implicit or explicit: share.acknowledgement.mode), and cfg.X passing X to the
 * consumer's configuration.
 *
 * It subscribes, polls until its stdin closes (or says "stop"), and prints one JSON line per event:
 * {"event":"record","partition":P,"offset":O,"delivery":N,"value":V,"ack":A} for each record delivered,
 * {"event":"commit","errors":{...}} after each commitSync of a non-empty poll, {"event":"closed"} last.
 *
 * In explicit mode the value decides the acknowledgement, so the test chooses by what it produces: a value
 * holding "release" is RELEASEd on its first delivery (it must come back with delivery count 2, then it is
 * accepted), one holding "reject" is REJECTed (it must never come back), one holding "renew" is RENEWed
 * on its first appearance (KIP-1222: the commitSync extends its lock, it stays this consumer's and the next
 * poll hands it back) and ACCEPTed on its second, the others are ACCEPTed. In implicit mode the next poll or
 * commitSync accepts the whole previous batch.
 */
public final class ShareApp {
    private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    private static volatile boolean stopping;

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new LinkedHashMap<>();
        for (String arg : argv) {
            int eq = arg.indexOf('=');
            a.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", a.get("bootstrap"));
        p.put("group.id", a.get("group"));
        p.put("client.id", a.getOrDefault("client", "share-app"));
        boolean explicit = "explicit".equals(a.getOrDefault("mode", "implicit"));
        p.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        for (Map.Entry<String, String> e : a.entrySet()) {
            if (e.getKey().startsWith("cfg.")) p.put(e.getKey().substring(4), e.getValue());
        }
        Thread watcher = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("stop")) { }
            } catch (Exception ignored) { }
            stopping = true;
        });
        watcher.setDaemon(true);
        watcher.start();

        try (KafkaShareConsumer<String, String> consumer =
                 new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(a.get("topic")));
            print(Map.of("event", "subscribed"));
            Set<String> renewed = new HashSet<>();
            while (!stopping) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
                if (batch.isEmpty()) continue;
                for (ConsumerRecord<String, String> r : batch) {
                    Optional<Short> count = r.deliveryCount();
                    String ack = "ACCEPT";
                    if (explicit) {
                        String v = String.valueOf(r.value());
                        AcknowledgeType type = AcknowledgeType.ACCEPT;
                        if (v.contains("reject")) type = AcknowledgeType.REJECT;
                        else if (v.contains("renew") && renewed.add(r.partition() + ":" + r.offset())) type = AcknowledgeType.RENEW;
                        else if (v.contains("release") && count.orElse((short) 0) == 1) type = AcknowledgeType.RELEASE;
                        consumer.acknowledge(r, type);
                        ack = type.name();
                    }
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("event", "record");
                    m.put("partition", r.partition());
                    m.put("offset", r.offset());
                    m.put("delivery", count.map(Short::intValue).orElse(-1));
                    m.put("value", r.value());
                    m.put("ack", ack);
                    print(m);
                }
                commit(consumer);
            }
        } catch (Throwable t) {
            print(Map.of("event", "error", "error", t.getClass().getName() + ": " + t.getMessage()));
        }
        print(Map.of("event", "closed"));
    }

    private static void commit(KafkaShareConsumer<String, String> consumer) {
        Map<String, Object> errors = new LinkedHashMap<>();
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : consumer.commitSync().entrySet()) {
            e.getValue().ifPresent(x -> errors.put(e.getKey().toString(), x.getClass().getSimpleName() + ": " + x.getMessage()));
        }
        print(Map.of("event", "commit", "errors", errors));
    }

    /** One JSON line, written by Interop's writer (same folder, same class path). */
    private static void print(Map<String, Object> m) {
        OUT.println(Interop.Json.of(m));
    }
}
