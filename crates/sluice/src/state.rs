//! Checkpoints: what `state_dict()` saves and `load_state_dict()` reads. The format lives in
//! core beside the cursors and restart records it serialises
//! ([`sluice_core::exec::checkpoint`]); these are the names the dataset uses.

pub(crate) use sluice_core::exec::checkpoint::{
    check_data, check_functions, check_position, elastic_epoch, from_tree, function_codes, to_tree,
};
pub use sluice_core::exec::checkpoint::{
    elastic_state, node_name, Elastic, FunctionCode, IterState, NodeState,
};
