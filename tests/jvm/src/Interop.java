import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client's side of tests/integration/test_java_client.py: one JVM per test module, driven over
 * stdin/stdout so the JVM's start-up is paid once.
 *
 * Each line read is one command: tab-separated tokens, the first the command's name, the rest key=value
 * settings; a key "cfg.X" passes X straight to the client's configuration. Each command answers with exactly
 * one JSON line: {"ok":true,...results} or {"ok":false,"error":"...","causes":[...]}. Every command makes its
 * own clients and closes them, so the commands are independent of one another.
 */
public final class Interop {
    private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    public static void main(String[] argv) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        OUT.println(Json.of(Map.of("ok", true, "ready", org.apache.kafka.common.utils.internals.AppInfoParser.getVersion())));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            String[] tokens = line.split("\t");
            Map<String, String> args = new LinkedHashMap<>();
            for (int i = 1; i < tokens.length; i++) {
                int eq = tokens[i].indexOf('=');
                args.put(tokens[i].substring(0, eq), tokens[i].substring(eq + 1));
            }
            Map<String, Object> result;
            try {
                result = run(tokens[0], args);
                result.put("ok", true);
            } catch (Throwable t) {
                result = new LinkedHashMap<>();
                result.put("ok", false);
                result.put("error", t.getClass().getName() + ": " + t.getMessage());
                List<String> causes = new ArrayList<>();
                for (Throwable c = t.getCause(); c != null && causes.size() < 5; c = c.getCause()) {
                    causes.add(c.getClass().getName() + ": " + c.getMessage());
                }
                result.put("causes", causes);
            }
            OUT.println(Json.of(result));
        }
    }

    private static Map<String, Object> run(String command, Map<String, String> a) throws Exception {
        switch (command) {
            case "produce": return produce(a);
            case "consume": return consume(a);
            case "txn": return transactions(a);
            case "txns": return manyTransactions(a);
            case "ctp": return consumeTransformProduce(a);
            case "members": return members(a);
            case "offsets": return offsets(a);
            case "groups": return groups(a);
            case "features": return features(a);
            case "topics": return topics(a);
            case "configs": return configs(a);
            case "broker_configs": return brokerConfigs(a);
            case "cluster": return cluster(a);
            case "acls": return acls(a);
            case "scram": return scram(a);
            case "reassign": return reassign(a);
            default: throw new IllegalArgumentException("unknown command " + command);
        }
    }

    private static Properties props(Map<String, String> a) {
        Properties p = new Properties();
        p.put("bootstrap.servers", a.get("bootstrap"));
        for (Map.Entry<String, String> e : a.entrySet()) {
            if (e.getKey().startsWith("cfg.")) p.put(e.getKey().substring(4), e.getValue());
        }
        return p;
    }

    private static int intArg(Map<String, String> a, String key, int dflt) {
        return a.containsKey(key) ? Integer.parseInt(a.get(key)) : dflt;
    }

    private static KafkaProducer<String, String> producer(Map<String, String> a) {
        Properties p = props(a);
        p.putIfAbsent("acks", "all");
        p.putIfAbsent("enable.idempotence", "true");
        p.putIfAbsent("linger.ms", "5");
        p.putIfAbsent("delivery.timeout.ms", "30000");
        p.putIfAbsent("request.timeout.ms", "15000");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    /** Records "key-i" / "value-i-<tag>" with a header and a fixed timestamp, on one partition, synchronously acked. */
    private static List<Object> send(KafkaProducer<String, String> producer, Map<String, String> a, String tag) throws Exception {
        String topic = a.get("topic");
        int n = intArg(a, "n", 10);
        int partition = intArg(a, "partition", 0);  // -1: the default partitioner picks, by key
        long ts = Long.parseLong(a.getOrDefault("ts", "1700000000000"));
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            ProducerRecord<String, String> r = new ProducerRecord<>(topic, partition < 0 ? null : partition, ts + i, "key-" + i,
                    "value-" + i + "-" + tag);
            r.headers().add("src", "java".getBytes(StandardCharsets.UTF_8));
            futures.add(producer.send(r));
        }
        producer.flush();
        List<Object> offsets = new ArrayList<>();
        for (Future<RecordMetadata> f : futures) offsets.add(f.get().offset());
        return offsets;
    }

    private static Map<String, Object> produce(Map<String, String> a) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<String, String> producer = producer(a)) {
            out.put("offsets", send(producer, a, a.getOrDefault("tag", "java")));
        }
        return out;
    }

    /** Subscribes (group given) or assigns partition 0 from the start, polls until n records or the deadline. */
    private static Map<String, Object> consume(Map<String, String> a) {
        Properties p = props(a);
        String group = a.get("group");
        if (group != null) p.put("group.id", group);
        p.putIfAbsent("auto.offset.reset", "earliest");
        p.putIfAbsent("enable.auto.commit", "false");
        int n = intArg(a, "n", 10);
        long deadline = System.currentTimeMillis() + intArg(a, "timeout_ms", 30000);
        List<Object> records = new ArrayList<>();
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            String topic = a.get("topic");
            if (group != null) {
                consumer.subscribe(List.of(topic));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                for (int i = 0; i < intArg(a, "partitions", 1); i++) tps.add(new TopicPartition(topic, i));
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
            }
            while (records.size() < n && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : batch) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("partition", r.partition());
                    m.put("offset", r.offset());
                    m.put("key", r.key());
                    m.put("value", r.value());
                    m.put("timestamp", r.timestamp());
                    Map<String, Object> headers = new LinkedHashMap<>();
                    for (Header h : r.headers()) headers.put(h.key(), h.value() == null ? null : new String(h.value(), StandardCharsets.UTF_8));
                    m.put("headers", headers);
                    records.add(m);
                }
            }
            if (group != null) {
                consumer.commitSync();
                Map<String, Object> committed = new LinkedHashMap<>();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumer.committed(consumer.assignment()).entrySet()) {
                    committed.put(e.getKey().toString(), e.getValue() == null ? null : e.getValue().offset());
                }
                out.put("committed", committed);
                out.put("assignment", consumer.assignment().size());
            }
        }
        out.put("records", records);
        return out;
    }

    /**
     * `members` consumers of one group, each on its own thread (KafkaConsumer is single-threaded), polling
     * until together they have read n records and every member holds partitions; each member's assignment
     * and count are reported. The group must split the partitions between them, under either protocol.
     */
    private static Map<String, Object> members(Map<String, String> a) throws Exception {
        int count = intArg(a, "members", 2);
        int n = intArg(a, "n", 10);
        long deadline = System.currentTimeMillis() + intArg(a, "timeout_ms", 45000);
        java.util.concurrent.atomic.AtomicInteger total = new java.util.concurrent.atomic.AtomicInteger();
        java.util.concurrent.atomic.AtomicInteger commitsRetried = new java.util.concurrent.atomic.AtomicInteger();
        List<Map<String, Object>> reports = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = java.util.Collections.synchronizedList(new ArrayList<>());
        int partitions = intArg(a, "partitions", 1);
        // Each member's assignment as of its last poll; all stop once these are disjoint, non-empty and cover
        // every partition (a settled group) and the records are all read.
        java.util.concurrent.ConcurrentHashMap<Integer, Set<Integer>> holding = new java.util.concurrent.ConcurrentHashMap<>();
        java.util.function.BooleanSupplier settled = () -> {
            if (holding.size() < count) return false;
            Set<Integer> union = new HashSet<>();
            int sum = 0;
            for (Set<Integer> owned : holding.values()) {
                if (owned.isEmpty()) return false;
                union.addAll(owned);
                sum += owned.size();
            }
            return union.size() == partitions && sum == partitions;
        };
        long start = System.currentTimeMillis();
        java.util.concurrent.CountDownLatch polled = new java.util.concurrent.CountDownLatch(count);
        java.util.concurrent.CountDownLatch described = new java.util.concurrent.CountDownLatch(1);
        for (int m = 0; m < count; m++) {
            Map<String, Object> report = new java.util.concurrent.ConcurrentHashMap<>();
            reports.add(report);
            int member = m;
            Thread t = new Thread(() -> {
                Properties p = props(a);
                p.put("group.id", a.get("group"));
                p.put("auto.offset.reset", "earliest");
                p.put("enable.auto.commit", "false");
                int mine = 0;
                List<Object> history = new ArrayList<>();  // [ms since start, assignment] at each change
                try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
                    consumer.subscribe(List.of(a.get("topic")));
                    while ((total.get() < n || !settled.getAsBoolean()) && System.currentTimeMillis() < deadline) {
                        ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
                        mine += batch.count();
                        total.addAndGet(batch.count());
                        if (!batch.isEmpty()) {
                            try {
                                consumer.commitSync();
                            } catch (org.apache.kafka.clients.consumer.CommitFailedException e) {
                                // A rebalance moved the member epoch while these records were processed
                                // (STALE_MEMBER_EPOCH under KIP-848, as a Kafka broker answers too): the
                                // next poll brings the new epoch, and the records may be seen again.
                                commitsRetried.incrementAndGet();
                            }
                        }
                        Set<Integer> owned = new HashSet<>();
                        for (TopicPartition tp : consumer.assignment()) owned.add(tp.partition());
                        if (!owned.equals(holding.get(member))) history.add(List.of(System.currentTimeMillis() - start, new ArrayList<>(owned)));
                        holding.put(member, owned);
                    }
                    report.put("history", history);
                    polled.countDown();
                    described.await();  // still members while the group is described
                    List<Object> parts = new ArrayList<>();
                    for (TopicPartition tp : consumer.assignment()) parts.add(tp.partition());
                    parts.sort((x, y) -> Integer.compare((Integer) x, (Integer) y));
                    report.put("assignment", parts);
                    report.put("records", mine);
                } catch (Throwable e) {
                    failures.add(e);
                    polled.countDown();
                }
            });
            threads.add(t);
            t.start();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        polled.await();
        try (Admin admin = admin(a)) {
            // What the coordinator holds: each member's current and (KIP-848) target assignment.
            var group = admin.describeConsumerGroups(List.of(a.get("group"))).all().get().get(a.get("group"));
            List<Object> members = new ArrayList<>();
            for (var member : group.members()) {
                Map<String, Object> dm = new LinkedHashMap<>();
                dm.put("client_id", member.clientId());
                dm.put("assignment", partitionsOf(member.assignment().topicPartitions()));
                dm.put("target", member.targetAssignment().map(t -> (Object) partitionsOf(t.topicPartitions())).orElse(null));
                members.add(dm);
            }
            out.put("described", members);
            out.put("state", group.groupState().toString());
        } catch (Exception e) {
            out.put("described", e.toString());
        } finally {
            described.countDown();
        }
        for (Thread t : threads) t.join();
        if (!failures.isEmpty()) throw new RuntimeException(failures.get(0));
        out.put("members", reports);
        out.put("total", total.get());
        out.put("commits_refused_by_a_rebalance", commitsRetried.get());
        return out;
    }

    private static List<Object> partitionsOf(Set<TopicPartition> tps) {
        List<Object> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.partition());
        out.sort((x, y) -> Integer.compare((Integer) x, (Integer) y));
        return out;
    }

    /** TV1 or TV2, whichever the broker finalizes: commit a batch, abort a batch, commit another. */
    private static Map<String, Object> transactions(Map<String, String> a) throws Exception {
        Map<String, String> b = new HashMap<>(a);
        b.put("cfg.transactional.id", a.get("txn_id"));
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<String, String> producer = producer(b)) {
            producer.initTransactions();
            producer.beginTransaction();
            out.put("committed1", send(producer, a, "c1"));
            producer.commitTransaction();
            producer.beginTransaction();
            out.put("aborted", send(producer, a, "a"));
            producer.abortTransaction();
            producer.beginTransaction();
            out.put("committed2", send(producer, a, "c2"));
            producer.commitTransaction();
        }
        return out;
    }

    /**
     * `txns` transactions of `n` records each over `partitions` partitions (round robin), committing the even
     * ones and aborting the odd ones; then what the coordinator and the partitions say of the producer
     * (describeTransactions, describeProducers): under Transactions V2 every end bumps the epoch.
     */
    private static Map<String, Object> manyTransactions(Map<String, String> a) throws Exception {
        Map<String, String> b = new HashMap<>(a);
        b.put("cfg.transactional.id", a.get("txn_id"));
        String topic = a.get("topic");
        int txns = intArg(a, "txns", 10);
        int n = intArg(a, "n", 3);
        int partitions = intArg(a, "partitions", 1);
        Map<String, Object> out = new LinkedHashMap<>();
        List<Object> committed = new ArrayList<>();
        try (KafkaProducer<String, String> producer = producer(b)) {
            producer.initTransactions();
            for (int t = 0; t < txns; t++) {
                producer.beginTransaction();
                List<Future<RecordMetadata>> futures = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    String value = "t" + t + "-" + i;
                    futures.add(producer.send(new ProducerRecord<>(topic, (t * n + i) % partitions, "k" + i, value)));
                    if (t % 2 == 0) committed.add(value);
                }
                for (Future<RecordMetadata> f : futures) f.get();
                if (t % 2 == 0) producer.commitTransaction(); else producer.abortTransaction();
            }
        }
        out.put("committed_values", committed);
        try (Admin admin = admin(a)) {
            var state = admin.describeTransactions(List.of(a.get("txn_id"))).description(a.get("txn_id")).get();
            out.put("coordinator_epoch", (int) state.producerEpoch());
            out.put("coordinator_producer_id", state.producerId());
            out.put("state", state.state().toString());
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            Map<String, Object> epochs = new LinkedHashMap<>();
            var described = admin.describeProducers(tps).all().get();
            for (TopicPartition tp : tps) {
                List<Object> seen = new ArrayList<>();
                for (var ps : described.get(tp).activeProducers()) seen.add(List.of(ps.producerId(), ps.producerEpoch()));
                epochs.put(String.valueOf(tp.partition()), seen);
            }
            out.put("partition_producers", epochs);
        }
        return out;
    }

    /**
     * Exactly-once consume-transform-produce: read `in` as group `group`, write each value upper-cased to
     * `out` in one transaction that also commits the group's offsets (sendOffsetsToTransaction with the
     * consumer's group metadata, so the coordinator can fence a zombie of an older generation).
     */
    private static Map<String, Object> consumeTransformProduce(Map<String, String> a) throws Exception {
        Properties cp = props(a);
        cp.put("group.id", a.get("group"));
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        cp.put("isolation.level", "read_committed");
        Map<String, String> pa = new HashMap<>();
        pa.put("bootstrap", a.get("bootstrap"));
        pa.put("cfg.transactional.id", a.get("txn_id"));
        int n = intArg(a, "n", 10);
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer());
             KafkaProducer<String, String> producer = producer(pa)) {
            producer.initTransactions();
            consumer.subscribe(List.of(a.get("in")));
            int seen = 0;
            int transactions = 0;
            long deadline = System.currentTimeMillis() + intArg(a, "timeout_ms", 30000);
            while (seen < n && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(200));
                if (batch.isEmpty()) continue;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : batch) {
                    producer.send(new ProducerRecord<>(a.get("out"), r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    seen++;
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
                transactions++;
            }
            out.put("seen", seen);
            out.put("transactions", transactions);
        }
        return out;
    }

    private static Admin admin(Map<String, String> a) {
        Properties p = props(a);
        p.putIfAbsent("request.timeout.ms", "15000");
        p.putIfAbsent("default.api.timeout.ms", "30000");
        return Admin.create(p);
    }

    private static Map<String, Object> describeTopic(Admin admin, String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("name", d.name());
        m.put("id", d.topicId().toString());
        m.put("internal", d.isInternal());
        List<Object> parts = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            Map<String, Object> pm = new LinkedHashMap<>();
            pm.put("partition", p.partition());
            pm.put("leader", p.leader() == null ? null : p.leader().id());
            pm.put("replicas", ids(p.replicas()));
            pm.put("isr", ids(p.isr()));
            parts.add(pm);
        }
        m.put("partitions", parts);
        return m;
    }

    private static List<Object> ids(List<Node> nodes) {
        List<Object> out = new ArrayList<>();
        for (Node n : nodes) out.add(n.id());
        return out;
    }

    private static long listOffset(Admin admin, TopicPartition tp, org.apache.kafka.clients.admin.OffsetSpec spec) throws Exception {
        return admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get().offset();
    }

    /** listOffsets (earliest, latest, by timestamp, max timestamp), deleteRecords, earliest again. */
    private static Map<String, Object> offsets(Map<String, String> a) throws Exception {
        TopicPartition tp = new TopicPartition(a.get("topic"), 0);
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(a)) {
            out.put("earliest", listOffset(admin, tp, org.apache.kafka.clients.admin.OffsetSpec.earliest()));
            out.put("latest", listOffset(admin, tp, org.apache.kafka.clients.admin.OffsetSpec.latest()));
            out.put("for_timestamp", listOffset(admin, tp, org.apache.kafka.clients.admin.OffsetSpec.forTimestamp(Long.parseLong(a.get("ts")))));
            var max = admin.listOffsets(Map.of(tp, org.apache.kafka.clients.admin.OffsetSpec.maxTimestamp())).partitionResult(tp).get();
            out.put("max_timestamp", List.of(max.offset(), max.timestamp()));
            var deleted = admin.deleteRecords(Map.of(tp, org.apache.kafka.clients.admin.RecordsToDelete.beforeOffset(Long.parseLong(a.get("delete_before")))));
            out.put("low_watermark", deleted.lowWatermarks().get(tp).get().lowWatermark());
            out.put("earliest_after", listOffset(admin, tp, org.apache.kafka.clients.admin.OffsetSpec.earliest()));
        }
        return out;
    }

    /** Describe consumer groups, list and alter their committed offsets, delete them. */
    private static Map<String, Object> groups(Map<String, String> a) throws Exception {
        List<String> ids = List.of(a.get("groups").split(","));
        TopicPartition tp = new TopicPartition(a.get("topic"), 0);
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(a)) {
            Set<String> listed = new HashSet<>();
            for (var g : admin.listGroups().all().get()) listed.add(g.groupId());
            out.put("listed", listed.containsAll(ids));
            Map<String, Object> described = new LinkedHashMap<>();
            for (var e : admin.describeConsumerGroups(ids).all().get().entrySet()) {
                Map<String, Object> d = new LinkedHashMap<>();
                d.put("state", e.getValue().groupState().toString());
                d.put("type", e.getValue().type().toString());
                d.put("members", e.getValue().members().size());
                described.put(e.getKey(), d);
            }
            out.put("described", described);
            Map<String, Object> committed = new LinkedHashMap<>();
            for (String id : ids) {
                OffsetAndMetadata o = admin.listConsumerGroupOffsets(id).partitionsToOffsetAndMetadata().get().get(tp);
                committed.put(id, o == null ? null : o.offset());
            }
            out.put("committed", committed);
            admin.alterConsumerGroupOffsets(ids.get(0), Map.of(tp, new OffsetAndMetadata(1))).all().get();
            out.put("altered", admin.listConsumerGroupOffsets(ids.get(0)).partitionsToOffsetAndMetadata().get().get(tp).offset());
            admin.deleteConsumerGroups(ids).all().get();
            Set<String> after = new HashSet<>();
            for (var g : admin.listGroups().all().get()) after.add(g.groupId());
            after.retainAll(ids);
            out.put("after_delete", new ArrayList<>(after));
        }
        return out;
    }

    /** Create (with a config), list, describe, create again (refused), delete, list. */
    private static Map<String, Object> topics(Map<String, String> a) throws Exception {
        String topic = a.get("topic");
        int partitions = intArg(a, "partitions", 3);
        short rf = (short) intArg(a, "rf", 1);
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(a)) {
            NewTopic nt = new NewTopic(topic, partitions, rf).configs(Map.of("cleanup.policy", "compact", "retention.ms", "123456"));
            var created = admin.createTopics(List.of(nt));
            created.all().get();
            out.put("created_partitions", created.numPartitions(topic).get());
            out.put("created_rf", (int) created.replicationFactor(topic).get());
            out.put("listed", admin.listTopics().names().get().contains(topic));
            out.put("described", describeTopic(admin, topic));
            try {
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
                out.put("recreate", "accepted");
            } catch (Exception e) {
                out.put("recreate", e.getCause() == null ? e.toString() : e.getCause().getClass().getSimpleName());
            }
            admin.createPartitions(Map.of(topic, org.apache.kafka.clients.admin.NewPartitions.increaseTo(partitions + 1))).all().get();
            out.put("after_create_partitions", ((List<?>) describeTopic(admin, topic).get("partitions")).size());
            admin.deleteTopics(List.of(topic)).all().get();
            long deadline = System.currentTimeMillis() + 15000;
            boolean gone = false;
            while (!gone && System.currentTimeMillis() < deadline) {
                gone = !admin.listTopics().names().get().contains(topic);
                if (!gone) Thread.sleep(100);
            }
            out.put("deleted", gone);
        }
        return out;
    }

    private static Map<String, Object> configMap(Config config) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (ConfigEntry e : config.entries()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("value", e.value());
            m.put("source", e.source().name());
            m.put("read_only", e.isReadOnly());
            m.put("sensitive", e.isSensitive());
            out.put(e.name(), m);
        }
        return out;
    }

    /** Describe a topic's and a broker's configs, set and delete a topic config incrementally. */
    private static Map<String, Object> configs(Map<String, String> a) throws Exception {
        String topic = a.get("topic");
        ConfigResource tr = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        ConfigResource br = new ConfigResource(ConfigResource.Type.BROKER, a.getOrDefault("broker", "1"));
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(a)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            out.put("topic_before", configMap(admin.describeConfigs(List.of(tr)).all().get().get(tr)));
            out.put("broker", configMap(admin.describeConfigs(List.of(br)).all().get().get(br)));
            Map<ConfigResource, Collection<AlterConfigOp>> ops = Map.of(tr, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("max.message.bytes", "65536"), AlterConfigOp.OpType.SET)));
            admin.incrementalAlterConfigs(ops).all().get();
            out.put("topic_set", configMap(admin.describeConfigs(List.of(tr)).all().get().get(tr)));
            admin.incrementalAlterConfigs(Map.of(tr, List.of(
                    new AlterConfigOp(new ConfigEntry("max.message.bytes", ""), AlterConfigOp.OpType.DELETE)))).all().get();
            out.put("topic_deleted", configMap(admin.describeConfigs(List.of(tr)).all().get().get(tr)));
            try {
                admin.incrementalAlterConfigs(Map.of(tr, List.of(
                        new AlterConfigOp(new ConfigEntry("retention.ms", "not-a-number"), AlterConfigOp.OpType.SET)))).all().get();
                out.put("invalid", "accepted");
            } catch (Exception e) {
                out.put("invalid", e.getCause() == null ? e.toString() : e.getCause().getClass().getSimpleName());
            }
        }
        return out;
    }

    /** kafka-configs.sh --entity-type brokers: the cluster default (--entity-default, the empty name) and one
     *  node's value of a key set, described with their sources (synonyms included), a key the broker cannot
     *  change refused, and both values deleted again. */
    private static Map<String, Object> brokerConfigs(Map<String, String> a) throws Exception {
        String key = a.get("key");
        ConfigResource node = new ConfigResource(ConfigResource.Type.BROKER, a.getOrDefault("broker", "1"));
        ConfigResource cluster = new ConfigResource(ConfigResource.Type.BROKER, "");
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(a)) {
            admin.incrementalAlterConfigs(Map.of(cluster, List.of(
                    new AlterConfigOp(new ConfigEntry(key, a.get("default_value")), AlterConfigOp.OpType.SET)))).all().get();
            out.put("after_default", configMap(admin.describeConfigs(List.of(node)).all().get().get(node)).get(key));
            out.put("cluster", configMap(admin.describeConfigs(List.of(cluster)).all().get().get(cluster)).get(key));
            admin.incrementalAlterConfigs(Map.of(node, List.of(
                    new AlterConfigOp(new ConfigEntry(key, a.get("node_value")), AlterConfigOp.OpType.SET)))).all().get();
            Config described = admin.describeConfigs(List.of(node), new DescribeConfigsOptions().includeSynonyms(true))
                    .all().get().get(node);
            ConfigEntry entry = described.get(key);
            out.put("after_node", configMap(described).get(key));
            List<Object> synonyms = new ArrayList<>();
            for (ConfigEntry.ConfigSynonym s : entry.synonyms()) synonyms.add(List.of(s.name(), String.valueOf(s.value()), s.source().name()));
            out.put("synonyms", synonyms);
            try {
                admin.incrementalAlterConfigs(Map.of(cluster, List.of(
                        new AlterConfigOp(new ConfigEntry("num.io.threads", "4"), AlterConfigOp.OpType.SET)))).all().get();
                out.put("refused", "accepted");
            } catch (Exception e) {
                out.put("refused", e.getCause() == null ? e.toString() : e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage());
            }
            admin.incrementalAlterConfigs(Map.of(
                    node, List.of(new AlterConfigOp(new ConfigEntry(key, ""), AlterConfigOp.OpType.DELETE)),
                    cluster, List.of(new AlterConfigOp(new ConfigEntry(key, ""), AlterConfigOp.OpType.DELETE)))).all().get();
            out.put("after_delete", configMap(admin.describeConfigs(List.of(node)).all().get().get(node)).get(key));
        }
        return out;
    }

    /** describeFeatures: the finalized levels (what the clients pick their protocol by) and the supported ranges. */
    private static Map<String, Object> features(Map<String, String> a) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(a)) {
            var f = admin.describeFeatures().featureMetadata().get();
            Map<String, Object> finalized = new LinkedHashMap<>();
            f.finalizedFeatures().forEach((name, range) -> finalized.put(name, List.of(range.minVersionLevel(), range.maxVersionLevel())));
            Map<String, Object> supported = new LinkedHashMap<>();
            f.supportedFeatures().forEach((name, range) -> supported.put(name, List.of(range.minVersion(), range.maxVersion())));
            out.put("finalized", finalized);
            out.put("supported", supported);
        }
        return out;
    }

    /** describeCluster and describeMetadataQuorum. */
    private static Map<String, Object> cluster(Map<String, String> a) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(a)) {
            DescribeClusterResult c = admin.describeCluster();
            out.put("cluster_id", c.clusterId().get());
            out.put("controller", c.controller().get().id());
            out.put("nodes", ids(new ArrayList<>(c.nodes().get())));
            QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get();
            out.put("quorum_leader", q.leaderId());
            out.put("quorum_epoch", q.leaderEpoch());
            out.put("quorum_hwm", q.highWatermark());
            List<Object> voters = new ArrayList<>();
            for (QuorumInfo.ReplicaState r : q.voters()) voters.add(Map.of("id", r.replicaId(), "leo", r.logEndOffset()));
            out.put("voters", voters);
            out.put("observers", q.observers().size());
        }
        return out;
    }

    private static List<Object> aclList(Collection<AclBinding> bindings) {
        List<Object> out = new ArrayList<>();
        for (AclBinding b : bindings) {
            out.add(List.of(b.pattern().resourceType().name(), b.pattern().name(), b.pattern().patternType().name(),
                    b.entry().principal(), b.entry().host(), b.entry().operation().name(), b.entry().permissionType().name()));
        }
        out.sort((x, y) -> x.toString().compareTo(y.toString()));
        return out;
    }

    /** Create a literal and a prefixed ACL, describe by filter, delete, describe again. */
    private static Map<String, Object> acls(Map<String, String> a) throws Exception {
        String topic = a.get("topic");
        Map<String, Object> out = new LinkedHashMap<>();
        AclBinding literal = new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                new AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW));
        AclBinding prefixed = new AclBinding(new ResourcePattern(ResourceType.GROUP, topic + "-g", PatternType.PREFIXED),
                new AccessControlEntry("User:alice", "127.0.0.1", AclOperation.DESCRIBE, AclPermissionType.DENY));
        try (Admin admin = admin(a)) {
            admin.createAcls(List.of(literal, prefixed)).all().get();
            AclBindingFilter aliceFilter = new AclBindingFilter(ResourcePatternFilter.ANY,
                    new AccessControlEntryFilter("User:alice", null, AclOperation.ANY, AclPermissionType.ANY));
            out.put("described", aclList(admin.describeAcls(aliceFilter).values().get()));
            AclBindingFilter topicFilter = new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.MATCH), AccessControlEntryFilter.ANY);
            out.put("matching_topic", aclList(admin.describeAcls(topicFilter).values().get()));
            out.put("deleted", aclList(admin.deleteAcls(List.of(aliceFilter)).all().get()));
            out.put("after", aclList(admin.describeAcls(aliceFilter).values().get()));
        }
        return out;
    }

    /** Upsert a SCRAM user, describe, produce and consume as that user over SASL, delete the user. */
    private static Map<String, Object> scram(Map<String, String> a) throws Exception {
        String user = a.get("user");
        String password = a.get("password");
        ScramMechanism mech = ScramMechanism.fromMechanismName(a.getOrDefault("mechanism", "SCRAM-SHA-256"));
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(a)) {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(user, new ScramCredentialInfo(mech, 8192), password))).all().get();
            Map<String, UserScramCredentialsDescription> d = admin.describeUserScramCredentials(List.of(user)).all().get();
            List<Object> infos = new ArrayList<>();
            for (ScramCredentialInfo i : d.get(user).credentialInfos()) infos.add(List.of(i.mechanism().mechanismName(), i.iterations()));
            out.put("described", infos);
            Map<String, String> sasl = new HashMap<>();
            sasl.put("bootstrap", a.get("sasl_bootstrap"));
            sasl.put("topic", a.get("topic"));
            sasl.put("n", "5");
            sasl.put("cfg.security.protocol", "SASL_PLAINTEXT");
            sasl.put("cfg.sasl.mechanism", mech.mechanismName());
            sasl.put("cfg.sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                    + user + "\" password=\"" + password + "\";");
            out.put("sasl_produce", produce(sasl));
            out.put("sasl_consume", ((List<?>) consume(sasl).get("records")).size());
            Map<String, String> wrong = new HashMap<>(sasl);
            wrong.put("cfg.sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                    + user + "\" password=\"wrong\";");
            wrong.put("cfg.max.block.ms", "10000");
            try {
                produce(wrong);
                out.put("wrong_password", "accepted");
            } catch (Exception e) {
                Throwable c = e.getCause() == null ? e : e.getCause();
                out.put("wrong_password", c.getClass().getSimpleName());
            }
            admin.alterUserScramCredentials(List.of(new UserScramCredentialDeletion(user, mech))).all().get();
            out.put("after_delete", admin.describeUserScramCredentials().all().get().containsKey(user));
        }
        return out;
    }

    /** Move every replica of a partition one node along, wait for the move to finish, describe. */
    private static Map<String, Object> reassign(Map<String, String> a) throws Exception {
        String topic = a.get("topic");
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(a)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 2))).all().get();
            Thread.sleep(500);
            List<Object> before = new ArrayList<>();
            for (Object p : (List<?>) describeTopic(admin, topic).get("partitions")) before.add(((Map<?, ?>) p).get("replicas"));
            out.put("before", before);
            // Each replica moves to the next node id (1..nodes, wrapping): a new leader and a new follower set.
            int nodes = intArg(a, "nodes", 3);
            List<Integer> target = new ArrayList<>();
            for (Object id : (List<?>) before.get(0)) target.add(((Integer) id) % nodes + 1);
            out.put("target", target);
            TopicPartition tp = new TopicPartition(topic, 0);
            admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(target)))).all().get();
            long deadline = System.currentTimeMillis() + 30000;
            Map<TopicPartition, PartitionReassignment> ongoing = admin.listPartitionReassignments().reassignments().get();
            out.put("listed_while_ongoing", ongoing.containsKey(tp));
            while (!ongoing.isEmpty() && System.currentTimeMillis() < deadline) {
                Thread.sleep(200);
                ongoing = admin.listPartitionReassignments().reassignments().get();
            }
            out.put("finished", ongoing.isEmpty());
            // Metadata reaches the brokers a moment after the controller ends the move: the broker asked
            // may still show the adding replicas, as Kafka's may.
            List<?> after = (List<?>) describeTopic(admin, topic).get("partitions");
            while (!((Map<?, ?>) after.get(0)).get("replicas").equals(target) && System.currentTimeMillis() < deadline) {
                Thread.sleep(200);
                after = (List<?>) describeTopic(admin, topic).get("partitions");
            }
            out.put("after", after);
        }
        return out;
    }

    /** The smallest JSON writer that serves: maps, lists, strings, numbers, booleans, null. */
    static final class Json {
        static String of(Object o) {
            StringBuilder sb = new StringBuilder();
            write(sb, o);
            return sb.toString();
        }

        private static void write(StringBuilder sb, Object o) {
            if (o == null) {
                sb.append("null");
            } else if (o instanceof Map<?, ?> m) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    if (!first) sb.append(',');
                    first = false;
                    write(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (o instanceof Collection<?> c) {
                sb.append('[');
                boolean first = true;
                for (Object x : c) {
                    if (!first) sb.append(',');
                    first = false;
                    write(sb, x);
                }
                sb.append(']');
            } else if (o instanceof Number || o instanceof Boolean) {
                sb.append(o);
            } else {
                String s = o.toString();
                sb.append('"');
                for (int i = 0; i < s.length(); i++) {
                    char ch = s.charAt(i);
                    switch (ch) {
                        case '"': sb.append("\\\""); break;
                        case '\\': sb.append("\\\\"); break;
                        case '\n': sb.append("\\n"); break;
                        case '\r': sb.append("\\r"); break;
                        case '\t': sb.append("\\t"); break;
                        default:
                            if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
                            else sb.append(ch);
                    }
                }
                sb.append('"');
            }
        }
    }
}
