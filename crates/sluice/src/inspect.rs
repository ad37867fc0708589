//! Looking at a pipeline without iterating it yourself: its length, its fields, the class
//! names its labels index, and a count of its outputs.

use sluice_core::{Error, Length, Result};

use crate::{Dataset, IterOptions};

impl Dataset {
    /// The number of outputs (batches after `batch`), from the plan alone: nothing runs
    /// ([`sluice_core::LogicalPlan::length`]).
    ///
    /// ```
    /// use sluice::{Dataset, Length};
    /// let ds = Dataset::range(10).shard(0, 3, true)?.batch(2, false)?;
    /// assert_eq!(ds.length(), Length::Known(2));
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn length(&self) -> Length {
        self.plan().length()
    }

    /// The number of outputs: [`Dataset::length`] when the plan knows it, otherwise the
    /// pipeline runs (with `opts`) and its outputs are counted. A pipeline that repeats
    /// forever is an error, not an endless count.
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions, OpSpec};
    /// let ds = Dataset::range(10).filter(OpSpec::Noop.build()?)?.batch(4, false)?;
    /// assert_eq!(ds.count(&IterOptions::default())?, 3);
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn count(&self, opts: &IterOptions) -> Result<u64> {
        match self.length() {
            Length::Known(n) => Ok(n),
            Length::Infinite => Err(Error::invalid(format!(
                "count() would never end: {}",
                Length::Infinite
            ))),
            Length::Unknown(_) => {
                let mut n = 0;
                for out in self.iter(opts)? {
                    out?;
                    n += 1;
                }
                Ok(n)
            }
        }
    }

    /// The field names every output has, when the plan knows them (`None` after a Python
    /// function or `map_batches`, whose outputs only running shows).
    pub fn field_names(&self) -> Option<Vec<String>> {
        self.plan().schema().map(|s| (*s).clone())
    }

    /// The class names the `label` field indexes (`read_images` with parent-directory
    /// labels: the sorted directory names), whatever steps follow the source; `None` when
    /// the source assigns no labels.
    pub fn class_names(&self) -> Option<Vec<String>> {
        self.plan().source().class_names()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_ops::OpSpec;

    #[test]
    fn count_runs_only_when_the_plan_cannot_tell() {
        let opts = IterOptions {
            num_threads: Some(2),
            ..Default::default()
        };
        let keep = OpSpec::Noop.build().unwrap();
        let filtered = Dataset::range(10).filter(keep).unwrap();
        assert!(matches!(filtered.length(), Length::Unknown(_)));
        assert_eq!(filtered.count(&opts).unwrap(), 10);
        let batched = filtered.batch(3, true).unwrap();
        assert_eq!(batched.count(&opts).unwrap(), 3);
        let forever = Dataset::range(3).repeat(None).unwrap();
        let err = forever.count(&opts).unwrap_err().to_string();
        assert!(err.contains("never end"), "{err}");
        assert_eq!(forever.take(5).count(&opts).unwrap(), 5);
    }

    #[test]
    fn class_names_follow_the_source_through_every_step() {
        let dir = std::env::temp_dir().join(format!("sluice-classes-{}", std::process::id()));
        for (class, file) in [("dog", "a.jpg"), ("cat", "b.jpg"), ("cat", "c.jpg")] {
            std::fs::create_dir_all(dir.join(class)).unwrap();
            std::fs::write(dir.join(class).join(file), b"x").unwrap();
        }
        let root = [dir.display().to_string()];
        let ds = Dataset::read_images(&root, sluice_io::LabelMode::ParentDir).unwrap();
        let later = ds.shuffle(Some(1)).unwrap().batch(2, false).unwrap();
        assert_eq!(later.class_names().unwrap(), ["cat", "dog"]);
        assert_eq!(later.length(), Length::Known(2));
        let plain = Dataset::read_images(&root, sluice_io::LabelMode::None).unwrap();
        assert_eq!(plain.class_names(), None);
        assert_eq!(Dataset::range(3).class_names(), None);
        assert_eq!(Dataset::range(3).field_names().unwrap(), ["id"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
