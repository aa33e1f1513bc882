"""The web console: `odradek console --bootstrap-server HOST:PORT`, a separate process that shows a cluster.

Where it runs, and why
----------------------
The console is its own process that talks to the cluster through the Kafka protocol, with the bundled
asyncio admin, consumer and producer (client/), like any other client. It is not served from the brokers'
event loops, because:

- it can never slow a broker's data path: rendering pages, parsing JSON for a filter, holding browser
  connections all happen in another process (on another machine if wanted); what reaches the broker is a
  bounded number of ordinary admin requests and fetches per page, under the broker's own quotas and ACLs;
- it is authorized like every client: a user signs in as a Kafka principal (a SASL username and password,
  or with `--auth mtls` their own client certificate and key) and the console connects as that principal,
  so the cluster's ACLs decide every read and change (no second permission system, no super-user inside
  the broker waiting to be abused);
- it works against any Odradek cluster, and against Apache Kafka too (the Odradek-only parts — broker
  metrics discovered through `metrics.port` — degrade to "give --metrics-url");
- a console bug or upgrade never restarts a broker.

What only a broker could show (the log end offset beyond the high watermark, per-replica fetch state) is
out of its reach, and said so on the page; everything else the issue asks for has a Kafka API:
DescribeCluster, DescribeQuorum, DescribeLogDirs, Metadata, ListOffsets (earliest, latest, and latest with
read_committed for the last stable offset), DescribeConfigs, ListGroups, DescribeGroups,
ConsumerGroupDescribe (KIP-848), ShareGroupDescribe, DescribeShareGroupOffsets, OffsetFetch, ListTransactions, DescribeTransactions, DescribeProducers,
WriteTxnMarkers (abort), DescribeAcls, DescribeUserScramCredentials, DescribeClientQuotas.

The record filter (filter.py) is evaluated here, next to the consumer that reads the log, with a bound on
the records read per request (records.py): only the matches travel to the browser, and nothing a user
types ever runs on a broker. Share groups are read with ShareGroupDescribe and DescribeShareGroupOffsets
(members, assignments, share-partition start offsets and lag); in-flight and acquired records, lock
expiries, redeliveries and archived records live on the partition leaders and no Kafka admin API returns
them, so the page reads them from the leaders' /metrics (`odradek_share_partition_*{group,topic,partition}`,
the URLs the charts scrape, fetched when the page asks and cached like every answer), with the records each
member holds and the in-flight records by delivery count; against brokers without those series (Apache
Kafka) the page shows the coordinator's figures alone and says why. Two more things only a broker knows come
the same way: per-topic throughput (the brokers' `odradek_topic_*` counters, turned into rates by the
sampler) and the exact ISR timeline, which each Odradek broker keeps from the metadata log and serves as JSON
next to its /metrics (`/odradek/isr-events`; the metrics endpoint is already what the console finds through
`metrics.port`, already read-only and unauthenticated by design, and the timeline names no more than
`log_size_bytes{topic,partition}` does). Against other brokers the console samples the ISR through Metadata.
Resetting a share group's start offsets (AlterShareGroupOffsets) and deleting it pass the same gate as the
other changes.

Stack: Starlette on uvicorn (routing, forms, static files, an asyncio HTTP server with graceful shutdown)
and Jinja2 (autoescaped templates), server-rendered pages; htmx for the live banner and uPlot for the
charts, vendored in static/ with their licenses (about 100 KB; no CDN, the console runs offline).

Modules: filter (the expression language), scan (the record walk of a filtered browse: raw Fetch answers,
records built only for matches), records (browse, export, produce), reader (the pages' data,
cached), sampler (lag history and broker metrics), auth (sessions, CSRF, audit), app (routes and pages),
main (the command). The layer sits above client/ and protocol/ and imports nothing else of Odradek.
"""
