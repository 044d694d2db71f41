//! A real Kafka-protocol broker for the tests: tansu (a Rust broker with
//! sqlite storage) started on a free 127.0.0.1 port in a scratch
//! directory, plus rdkafka helpers to create topics, produce and read.
//!
//! `.ci/run` installs tansu; a developer can point `FVHOST_TANSU` at a
//! binary or put `tansu` on the PATH.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(20);

/// Where the tansu binary is, if anywhere: `FVHOST_TANSU`, the directory
/// `.ci/run` installs into, or the PATH.
pub fn tansu_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FVHOST_TANSU") {
        return Some(PathBuf::from(p));
    }
    let cached = PathBuf::from("/var/tmp/fvhost-tools/bin/tansu");
    if cached.exists() {
        return Some(cached);
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("tansu"))
        .find(|p| p.exists())
}

fn tansu() -> PathBuf {
    tansu_binary().unwrap_or_else(|| {
        panic!(
            "the Kafka tests need the tansu broker: run .ci/run, or `cargo install tansu --locked --features dynostore,libsql` and set FVHOST_TANSU"
        )
    })
}

/// Send one record, waiting while the producer's queue is full.
pub fn send_retrying(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut record: BaseRecord<'_, [u8], [u8]>,
) {
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, back)) => {
                record = back;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A running broker; stopped when dropped.
pub struct Broker {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Broker {
    /// Start tansu and wait until it accepts connections.
    pub fn start() -> Broker {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(tansu())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                "sqlite://tansu.db",
            ])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < TIMEOUT, "tansu did not start on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Broker {
            child,
            port,
            _dir: dir,
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A client config pointing at this broker.
    pub fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.addr());
        c
    }

    /// Create `topic` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = self.config().create().expect("admin");
        let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        let result = futures::executor::block_on(admin.create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        ))
        .expect("create topic");
        for r in result {
            r.expect("topic created");
        }
    }

    /// Produce (partition, key, payload) records and wait for every ack.
    pub fn produce(&self, topic: &str, records: &[(i32, String, String)]) {
        let producer: ThreadedProducer<DefaultProducerContext> =
            self.config().create().expect("producer");
        for (partition, key, payload) in records {
            let record = BaseRecord::to(topic)
                .partition(*partition)
                .key(key.as_bytes())
                .payload(payload.as_bytes());
            send_retrying(&producer, record);
        }
        producer.flush(TIMEOUT).expect("flush");
    }

    /// Every message of `topic` as (partition, offset, payload), read from
    /// the beginning to the high watermark of each partition.
    pub fn read_all(&self, topic: &str, partitions: i32) -> Vec<(i32, i64, String)> {
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", "fvhost-test-reader")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let ends = assign_from_beginning(&consumer, topic, partitions);
        let mut out = Vec::new();
        let mut next = vec![0i64; partitions as usize];
        let started = Instant::now();
        while (0..partitions as usize).any(|p| next[p] < ends[p]) {
            assert!(started.elapsed() < TIMEOUT * 3, "reading {topic} timed out");
            if let Some(m) = consumer.poll(Duration::from_millis(200)) {
                let m = m.expect("message");
                let payload = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                next[m.partition() as usize] = m.offset() + 1;
                out.push((m.partition(), m.offset(), payload));
            }
        }
        out
    }

    /// The table an upsert log leaves: per key, its last committed payload
    /// (read `read_committed`, partitions in offset order); a tombstone (a
    /// null payload) removes the key. Also how many tombstones were read.
    pub fn read_upserts(
        &self,
        topic: &str,
        partitions: i32,
    ) -> (std::collections::BTreeMap<String, String>, usize) {
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", "fvhost-test-upserts")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .expect("consumer");
        let ends = assign_from_beginning(&consumer, topic, partitions);
        let mut table = std::collections::BTreeMap::new();
        let mut tombstones = 0;
        let started = Instant::now();
        // The high watermark counts transaction markers too: read until
        // every partition's position reaches it.
        let done = |c: &BaseConsumer| {
            let positions = c.position().expect("position");
            (0..partitions).all(|p| {
                positions
                    .find_partition(topic, p)
                    .and_then(|e| match e.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    })
                    .is_some_and(|o| o >= ends[p as usize])
            })
        };
        while !done(&consumer) {
            assert!(started.elapsed() < TIMEOUT * 3, "reading {topic} timed out");
            if let Some(m) = consumer.poll(Duration::from_millis(200)) {
                let m = m.expect("message");
                let key =
                    String::from_utf8_lossy(m.key().expect("every record has a key")).into_owned();
                match m.payload() {
                    Some(p) => {
                        table.insert(key, String::from_utf8_lossy(p).into_owned());
                    }
                    None => {
                        tombstones += 1;
                        table.remove(&key);
                    }
                }
            }
        }
        (table, tombstones)
    }

    /// The offsets `group` committed for partitions 0..partitions of `topic`.
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", group)
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        let found = consumer
            .committed_offsets(tpl, TIMEOUT)
            .expect("committed offsets");
        found
            .elements()
            .iter()
            .map(|e| match e.offset() {
                Offset::Offset(o) => o,
                _ => -1,
            })
            .collect()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Assign `consumer` partitions 0..partitions of `topic` from their
/// beginning; each one's high watermark, where reading it ends.
fn assign_from_beginning(consumer: &BaseConsumer, topic: &str, partitions: i32) -> Vec<i64> {
    let mut tpl = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in 0..partitions {
        let (_, high) = consumer
            .fetch_watermarks(topic, p, TIMEOUT)
            .expect("watermarks");
        ends.push(high);
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    ends
}
