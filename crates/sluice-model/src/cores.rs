//! How many cores this process may use: the one answer every default thread count, profile
//! and cost model takes (it used to be asked in eight places with fallbacks of 1 or 2).

/// The cores this process may run on (`std::thread::available_parallelism`: the affinity
/// mask and a cgroup's CPU quota count), or 1 when the system cannot tell: a guess of more
/// would over-subscribe a machine that is smaller than guessed.
///
/// ```
/// assert!(sluice_model::cores::cores() >= 1);
/// ```
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
