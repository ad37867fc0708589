//! sluice stages away from their pipeline: what the process pool and the Ray backend share.
//!
//! - [`wire`]: the chunk wire format — every item field and [`sluice_core::Value`] losslessly,
//!   big buffers through shared memory ([`shm`]), typed errors both ways.
//! - [`stage`]: a stage's portable form (ops via [`sluice_core::Op::ship`], the source via
//!   [`sluice_core::Source::ship`]) — [`RemoteStage`] on the main side, [`StageRunner`] in a
//!   worker.
//! - [`actor_pool`]: the `ray` backend's scheduling ([`ActorPool`]: actors and local workers,
//!   retries, replacement, AutoPlacement), generic over the runtime that hosts the actors.
//! - [`service`]: the shared service's pieces (`docs/SERVICE.md`): a worker hosting many
//!   jobs' stages in weighted fair order ([`service::host`], [`service::fair`]), the shared
//!   stream's window ([`service::window`]) and the dispatcher's registry and scaling policy
//!   ([`service::registry`]).
//! - [`pool`]: the `processes` backend ([`ProcessBackend`]); which stages run on it is the
//!   optimizer's placement rule (`sluice_optimizer::rules::placement`, forced by
//!   `processes=N`).
//!
//! No Python here: Python UDFs ship and load through hooks the bindings provide
//! ([`stage::OpLoader`], [`wire::ExternalCodec`]).

pub mod actor_pool;
pub mod pool;
pub mod service;
pub mod shm;
pub mod stage;
pub mod wire;

pub use actor_pool::{ActorPool, ActorPoolOptions, ActorRuntime, ActorWorkers};
pub use pool::ProcessBackend;
pub use shm::{ShmConfig, ShmWriter};
pub use stage::{RemoteStage, StagePackage, StageRunner};
pub use wire::{ExternalCodec, WireError};

pub use sluice_core::exec::backend::PROCESSES;
