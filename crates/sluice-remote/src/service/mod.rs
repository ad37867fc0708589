//! The shared service's pieces (`docs/SERVICE.md`, design in `docs/design/SERVICE.md`): one
//! pool of workers serving the stages of many training jobs.
//!
//! - [`host`]: what one service worker runs — the stages of every job attached to it, keyed
//!   by content, their chunks started in weighted fair order ([`fair`]), and a shared stream
//!   window ([`window`]) so the jobs of a sweep compute each chunk once.
//! - [`registry`]: the dispatcher's soft state and decisions — jobs and their leases, workers,
//!   which worker a job's stage attaches to, and how many workers the pool needs.
//! - [`key`]: content keys (a stage's, a chunk's) that decide what may be shared.
//! - [`metrics`]: the service's own figures in the Prometheus text format.
//! - [`prefix`], [`cache`]: a stage's deterministic prefix computed once per item for every job
//!   and epoch, its records kept in cache shards by their value, and on each node
//!   ([`node_cache`]) once read or made there.
//!
//! No Ray here: the actors that carry these are thin Python (`sluice.service`), the calls
//! between them Ray's.

pub mod cache;
pub mod fair;
pub mod host;
pub mod key;
pub mod metrics;
pub mod node_cache;
pub mod prefix;
pub mod registry;
pub mod window;
