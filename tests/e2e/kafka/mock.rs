//! librdkafka's mock cluster with request tracking: it accepts the
//! transactional calls tansu lacks and records the API key of every
//! request it serves, so a test can check the order of a sink's calls.
//!
//! rdkafka's `MockCluster` hides request tracking, so this wraps the C API
//! (re-exported by rdkafka as `rdkafka::bindings`).

use std::ffi::{CStr, CString};

use rdkafka::ClientConfig;
use rdkafka::bindings as rd;
use rdkafka::producer::{BaseProducer, Producer};

/// Kafka API keys the tests look for.
pub mod api {
    pub const PRODUCE: i16 = 0;
    pub const INIT_PRODUCER_ID: i16 = 22;
    pub const ADD_PARTITIONS_TO_TXN: i16 = 24;
    pub const END_TXN: i16 = 26;
}

/// A mock cluster listening on 127.0.0.1, destroyed when dropped.
pub struct TrackedMock {
    cluster: *mut rd::rd_kafka_mock_cluster_t,
    bootstraps: String,
    // The cluster logs through this handle: it must outlive the cluster.
    _client: BaseProducer,
}

impl TrackedMock {
    /// A one-broker cluster that tracks requests from the start.
    pub fn start() -> TrackedMock {
        Self::start_with(true)
    }

    /// A one-broker cluster that keeps no record of requests (for tests
    /// that move much data).
    pub fn untracked() -> TrackedMock {
        Self::start_with(false)
    }

    fn start_with(track: bool) -> TrackedMock {
        let client: BaseProducer = ClientConfig::new().create().expect("client");
        // SAFETY: the handle is valid and outlives the cluster (field order
        // and Drop below destroy the cluster first).
        let cluster = unsafe { rd::rd_kafka_mock_cluster_new(client.client().native_ptr(), 1) };
        assert!(!cluster.is_null(), "mock cluster");
        // SAFETY: the cluster is valid; the string is owned by it.
        let bootstraps = unsafe { CStr::from_ptr(rd::rd_kafka_mock_cluster_bootstraps(cluster)) }
            .to_string_lossy()
            .into_owned();
        if track {
            // SAFETY: valid cluster.
            unsafe { rd::rd_kafka_mock_start_request_tracking(cluster) };
        }
        TrackedMock {
            cluster,
            bootstraps,
            _client: client,
        }
    }

    /// `host:port` of the broker.
    pub fn brokers(&self) -> String {
        self.bootstraps.clone()
    }

    /// Create a topic.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let name = CString::new(topic).expect("topic name");
        // SAFETY: valid cluster and C string.
        let err =
            unsafe { rd::rd_kafka_mock_topic_create(self.cluster, name.as_ptr(), partitions, 1) };
        assert_eq!(
            err,
            rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR,
            "create {topic}"
        );
    }

    /// The next `count` requests of `api_key` fail with `error`.
    pub fn fail_requests(&self, api_key: i16, error: rd::rd_kafka_resp_err_t, count: usize) {
        let errors = vec![error; count];
        // SAFETY: valid cluster; the array outlives the call (it is copied).
        unsafe {
            rd::rd_kafka_mock_push_request_errors_array(
                self.cluster,
                api_key,
                errors.len(),
                errors.as_ptr(),
            )
        };
    }

    /// Forget injected errors of `api_key`.
    pub fn clear_errors(&self, api_key: i16) {
        // SAFETY: valid cluster.
        unsafe { rd::rd_kafka_mock_clear_request_errors(self.cluster, api_key) };
    }

    /// The API keys of every request served so far, in arrival order.
    pub fn requests(&self) -> Vec<i16> {
        let mut count = 0usize;
        // SAFETY: valid cluster; the returned array holds `count` requests
        // that we own and free below.
        unsafe {
            let array = rd::rd_kafka_mock_get_requests(self.cluster, &mut count);
            if array.is_null() {
                return Vec::new();
            }
            let mut keyed: Vec<(i64, i16)> = (0..count)
                .map(|i| {
                    let r = *array.add(i);
                    (
                        rd::rd_kafka_mock_request_timestamp(r),
                        rd::rd_kafka_mock_request_api_key(r),
                    )
                })
                .collect();
            rd::rd_kafka_mock_request_destroy_array(array, count);
            keyed.sort_by_key(|(t, _)| *t);
            keyed.into_iter().map(|(_, k)| k).collect()
        }
    }
}

impl Drop for TrackedMock {
    fn drop(&mut self) {
        // SAFETY: created by rd_kafka_mock_cluster_new, destroyed once.
        unsafe { rd::rd_kafka_mock_cluster_destroy(self.cluster) };
    }
}
