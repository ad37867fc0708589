//! What a run tells the user when it ends: records and samples `on_error="skip"` left out, and
//! a memory cap that cost throughput. Composed here so every binding says the same thing.

use super::StatsReport;

/// The consumer waiting this share of the run on the memory cap is worth a warning.
const STARVED_SHARE: f64 = 0.1;

impl StatsReport {
    /// The warnings for the end of a run over `source` (its name), which left out
    /// `source_read_skips` records while it read (streaming sources; the readers that check
    /// every record at open warned then). Stage 0 is the source: its skips are those.
    ///
    /// ```
    /// use sluice_core::stats::{PipelineStats, StageInfo};
    /// let stage = |name: &str| StageInfo { name: name.into(), threads: 1, inline: false, queue_capacity: 2, pool: None };
    /// let report = PipelineStats::new(vec![stage("source: range"), stage("map")]).report();
    /// assert!(report.end_warnings("range", 0).is_empty());
    /// assert!(report.end_warnings("range", 2)[0].starts_with("range left out 2 record(s)"));
    /// ```
    pub fn end_warnings(&self, source: &str, source_read_skips: u64) -> Vec<String> {
        let mut out = Vec::new();
        if source_read_skips > 0 {
            out.push(format!(
                "{source} left out {source_read_skips} record(s) it could not read \
                 (on_error=\"skip\"); stats() counts them as the source's skips"
            ));
        }
        if let Some(m) = &self.memory {
            let share = m.starved_s / self.elapsed_s.max(1e-9);
            if share >= STARVED_SHARE || m.forced > 0 {
                let forced = if m.forced > 0 {
                    format!(
                        ", and let {} chunk(s) through over it to keep the run going",
                        m.forced
                    )
                } else {
                    String::new()
                };
                out.push(format!(
                    "the memory cap ({:.0} MB, peak {:.0} MB) kept the consumer waiting {:.1} s, \
                     {:.0}% of the iteration{forced}; raise memory_limit= (or use smaller \
                     batches) for full speed",
                    m.limit as f64 / 1e6,
                    m.peak_rss as f64 / 1e6,
                    m.starved_s,
                    100.0 * share,
                ));
            }
            // Workers' time, summed: a tenth of the run's wall time is already a share a
            // user would want to hear about.
            if m.transient_wait_s >= STARVED_SHARE * self.elapsed_s {
                out.push(format!(
                    "the memory cap ({:.0} MB) made {} big decode(s) wait {:.1} s in all for \
                     room beside the others'; raise memory_limit= (or use fewer threads) for \
                     full speed",
                    m.limit as f64 / 1e6,
                    m.transient_waits,
                    m.transient_wait_s,
                ));
            }
        }
        for stage in self.stages.iter().skip(1).filter(|s| s.skipped > 0) {
            out.push(format!(
                "stage '{}' skipped {} sample(s) an op failed on (on_error=\"skip\"); stats() \
                 counts them",
                stage.name, stage.skipped
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::prometheus::tests::report;
    use crate::exec::MemoryReport;

    fn memory(starved_s: f64, forced: u64) -> Option<MemoryReport> {
        Some(MemoryReport {
            limit: 400_000_000,
            peak_rss: 390_000_000,
            held_s: 1.0,
            held_chunks: 7,
            starved_s,
            forced,
            transient_waits: 0,
            transient_wait_s: 0.0,
        })
    }

    #[test]
    fn a_clean_run_says_nothing() {
        let mut r = report(None, None);
        r.stages.iter_mut().for_each(|s| s.skipped = 0);
        assert!(r.end_warnings("range", 0).is_empty());
        r.memory = memory(0.1, 0); // 5% of a 2 s run: not worth a warning
        assert!(r.end_warnings("range", 0).is_empty());
    }

    #[test]
    fn skips_are_named_by_source_and_stage_but_the_source_stage_is_not_repeated() {
        let mut r = report(None, None);
        r.stages[0].skipped = 3;
        r.stages[1].skipped = 5;
        let w = r.end_warnings("read_webdataset", 1);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("read_webdataset left out 1 record(s) it could not read"));
        assert!(w[1].starts_with("stage 'map \"f\"\\x\ny' skipped 5 sample(s) an op failed on"));
    }

    #[test]
    fn a_cap_that_cost_throughput_or_went_over_is_reported() {
        let mut r = report(None, None);
        r.stages.iter_mut().for_each(|s| s.skipped = 0);
        r.memory = memory(0.5, 0);
        let w = r.end_warnings("range", 0);
        assert_eq!(
            w,
            [
                "the memory cap (400 MB, peak 390 MB) kept the consumer waiting 0.5 s, 25% of the \
              iteration; raise memory_limit= (or use smaller batches) for full speed"
            ]
        );
        r.memory = memory(0.0, 2);
        let w = r.end_warnings("range", 0);
        assert!(
            w[0].contains("0% of the iteration, and let 2 chunk(s) through over it"),
            "{w:?}"
        );
    }

    #[test]
    fn big_decodes_that_waited_long_for_room_are_reported() {
        let mut r = report(None, None);
        r.stages.iter_mut().for_each(|s| s.skipped = 0);
        let mut m = memory(0.0, 0);
        if let Some(m) = &mut m {
            (m.transient_waits, m.transient_wait_s) = (3, 0.1); // 5% of a 2 s run
        }
        r.memory = m.clone();
        assert!(r.end_warnings("range", 0).is_empty());
        if let Some(m) = &mut m {
            (m.transient_waits, m.transient_wait_s) = (12, 0.8);
        }
        r.memory = m;
        assert_eq!(
            r.end_warnings("range", 0),
            [
                "the memory cap (400 MB) made 12 big decode(s) wait 0.8 s in all for room beside \
                 the others'; raise memory_limit= (or use fewer threads) for full speed"
            ]
        );
    }
}
