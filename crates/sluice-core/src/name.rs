//! Field names. A sample carries its field names with it, so every sample made and dropped
//! used to touch each name's reference count: a locked add and subtract per field per sample
//! (about a tenth of a Python function's per-sample cost), and a cache line every thread
//! writes. Names are interned for the life of the process instead, up to a bound, so a copy
//! is a pointer copy; names beyond the bound (data with a new field name per sample) are
//! reference-counted as before, never leaked.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// A field name: interned text, or shared text once the interned set is full.
///
/// ```
/// use sluice_core::Name;
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
    names: HashSet<&'static str>,
    bytes: usize,
}

static INTERNED: Mutex<Option<Interned>> = Mutex::new(None);

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
        let mut all = INTERNED.lock().unwrap_or_else(|p| p.into_inner());
        let all = all.get_or_insert_with(|| Interned {
            names: HashSet::new(),
            bytes: 0,
        });
        let n = match all.names.get(text) {
            Some(n) => *n,
            None if all.names.len() < MAX_NAMES && all.bytes + text.len() <= MAX_BYTES => {
                let n: &'static str = Box::leak(text.into());
                all.names.insert(n);
                all.bytes += text.len();
                n
            }
            None => return Name(Repr::Shared(text.into())),
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

impl From<&Name> for Name {
    fn from(n: &Name) -> Name {
        n.clone()
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
        let mut set = HashSet::new();
        set.insert(a.clone());
        assert!(set.contains("name_test_a"), "looked up by text");
    }

    #[test]
    fn names_past_the_bound_are_shared_not_leaked() {
        // Fills what is left of the bound (other tests' names share it), then one more.
        let mut last = Name::new("bound_0");
        for i in 1..=MAX_NAMES {
            last = Name::new(&format!("bound_{i}"));
        }
        assert!(matches!(last.0, Repr::Shared(_)), "the bound holds");
        let again = Name::new(&format!("bound_{MAX_NAMES}"));
        assert_eq!(last, again, "shared names still compare by text");
        assert!(!last.ptr_eq(&again));
        let all = INTERNED.lock().unwrap();
        let all = all.as_ref().unwrap();
        assert!(all.names.len() <= MAX_NAMES && all.bytes <= MAX_BYTES);
    }
}
