//! Field names. A sample carries its field names with it, so every sample made and dropped
//! used to touch each name's reference count: a locked add and subtract per field per sample
//! (about a tenth of a Python function's per-sample cost), and a cache line every thread
//! writes. Names are interned for the life of the process instead, up to a bound, so a copy
//! is a pointer copy; names beyond the bound (data with a new field name per sample) are
//! reference-counted as before, never leaked.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// A field name: interned text, or shared text once the interned set is full.
///
/// ```
/// use sluice_model::Name;
/// let a = Name::new("image");
/// let b = Name::from(String::from("image"));
/// assert_eq!(a, b);
/// assert_eq!(&*a, "image");
/// assert!(std::ptr::eq(a.as_str(), b.as_str()), "one interned copy");
/// ```
#[derive(Clone)]
pub struct Name(Repr);

#[derive(Clone)]
enum Repr {
    Interned(&'static str),
    Shared(Arc<str>),
}

/// How many distinct names, and how many bytes of them, are interned at most: field names
/// are few (a schema's columns), so only data that makes up names per sample reaches it.
const MAX_NAMES: usize = 16_384;
const MAX_BYTES: usize = 1 << 20;

struct Interned {
    names: BTreeSet<&'static str>,
    bytes: usize,
}

impl Interned {
    const fn new() -> Self {
        Interned {
            names: BTreeSet::new(),
            bytes: 0,
        }
    }
    /// The interned copy of `text`, interning it if there is room; `None` once the bound
    /// is reached.
    fn intern(&mut self, text: &str) -> Option<&'static str> {
        if let Some(n) = self.names.get(text) {
            return Some(n);
        }
        if self.names.len() == MAX_NAMES || self.bytes + text.len() > MAX_BYTES {
            return None;
        }
        let n: &'static str = Box::leak(text.into());
        self.names.insert(n);
        self.bytes += text.len();
        Some(n)
    }
}

static INTERNED: Mutex<Interned> = Mutex::new(Interned::new());

/// Names this thread interned or found interned lately: a lookup by text with no lock, for
/// ops that name their output fields by a literal per sample.
const RECENT: usize = 32;

thread_local! {
    static RECENT_NAMES: std::cell::RefCell<Vec<&'static str>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Name {
    /// The name `text`: the interned copy (interning it if there is room).
    pub fn new(text: &str) -> Name {
        let hit = RECENT_NAMES.with_borrow(|r| r.iter().copied().find(|n| *n == text));
        if let Some(n) = hit {
            return Name(Repr::Interned(n));
        }
        let interned = INTERNED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .intern(text);
        let Some(n) = interned else {
            return Name(Repr::Shared(text.into()));
        };
        RECENT_NAMES.with_borrow_mut(|r| {
            if r.len() == RECENT {
                r.remove(0);
            }
            r.push(n);
        });
        Name(Repr::Interned(n))
    }

    /// The name's text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Interned(s) => s,
            Repr::Shared(s) => s,
        }
    }

    /// Whether `self` and `other` are the same copy of a name (equal names usually are).
    pub fn ptr_eq(&self, other: &Name) -> bool {
        std::ptr::eq(self.as_str(), other.as_str())
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.ptr_eq(other) || self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for Name {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name::new(s)
    }
}

impl From<&String> for Name {
    fn from(s: &String) -> Name {
        Name::new(s)
    }
}

impl From<String> for Name {
    fn from(s: String) -> Name {
        Name::new(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_share_one_interned_copy() {
        let a = Name::new("name_test_a");
        let b = Name::from(String::from("name_test_a"));
        assert!(a.ptr_eq(&b));
        assert_eq!(a, b);
        assert_ne!(a, Name::new("name_test_b"));
        assert_eq!(a, "name_test_a");
        let mut set = std::collections::HashSet::new();
        set.insert(a.clone());
        assert!(set.contains("name_test_a"), "looked up by text");
    }

    #[test]
    fn names_past_the_bound_are_not_interned() {
        // A set of its own, so the process's set (other tests' names) stays as it is.
        let mut set = Interned::new();
        let first = set.intern("bound_0").unwrap();
        for i in 1..MAX_NAMES {
            set.intern(&format!("bound_{i}")).unwrap();
        }
        assert!(set.intern("one_more").is_none(), "the bound holds");
        assert!(
            std::ptr::eq(set.intern("bound_0").unwrap(), first),
            "known names still found"
        );
        assert!(set.names.len() == MAX_NAMES && set.bytes <= MAX_BYTES);
        let mut big = Interned::new();
        assert!(
            big.intern(&"x".repeat(MAX_BYTES + 1)).is_none(),
            "the byte bound holds"
        );
    }

    #[test]
    fn shared_names_compare_by_text() {
        let shared = Name(Repr::Shared("shared_name".into()));
        let interned = Name::new("shared_name");
        assert_eq!(shared, interned);
        assert!(!shared.ptr_eq(&interned));
        assert_eq!(shared.to_string(), "shared_name");
    }
}
