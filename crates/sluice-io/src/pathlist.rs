//! [`PathList`]: a listing's paths back to back in one buffer.

/// Paths stored back to back in one `String` with their end offsets: a listing of ImageNet's
/// 1.28 M files costs its bytes plus 8 per path, where a `Vec<String>` costs 24 more per path
/// and one allocation each (which a fresh process pays in page faults while it lists).
///
/// ```
/// use sluice_io::PathList;
/// let mut l = PathList::default();
/// l.push("a/x.jpg");
/// l.push("b/y.jpg");
/// assert_eq!((l.len(), l.get(1)), (2, "b/y.jpg"));
/// assert_eq!(l.iter().collect::<Vec<_>>(), ["a/x.jpg", "b/y.jpg"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathList {
    text: String,
    ends: Vec<usize>,
}

impl PathList {
    /// An empty list with room for `paths` paths of `bytes` bytes in all.
    pub fn with_capacity(paths: usize, bytes: usize) -> Self {
        PathList {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(paths),
        }
    }

    /// Number of paths.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds no path.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of all paths together.
    pub fn bytes(&self) -> usize {
        self.text.len()
    }

    /// The `i`-th path. Panics past the end, as slice indexing does.
    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }

    /// Appends a path.
    pub fn push(&mut self, path: &str) {
        self.text.push_str(path);
        self.ends.push(self.text.len());
    }

    /// Appends a path made of `parts` (no separator added between them).
    pub fn push_parts(&mut self, parts: &[&str]) {
        for p in parts {
            self.text.push_str(p);
        }
        self.ends.push(self.text.len());
    }

    /// Appends every path of `other` (taken as it is when this list is empty: a listing of
    /// a million paths is not copied into an empty list).
    pub fn append(&mut self, other: PathList) {
        if self.is_empty() {
            *self = other;
            return;
        }
        let shift = self.text.len();
        self.text.push_str(&other.text);
        self.ends.extend(other.ends.iter().map(|e| e + shift));
    }

    /// The paths in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The paths as owned strings.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }
}

impl<S: AsRef<str>> FromIterator<S> for PathList {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut l = PathList::default();
        for p in iter {
            l.push(p.as_ref());
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_keep_their_order_and_bytes_across_appends() {
        let a: PathList = ["/d/1.jpg", "", "/d/é.png"].into_iter().collect();
        let mut b = PathList::with_capacity(4, 64);
        b.push_parts(&["/e", "/", "2.jpg"]);
        b.append(a.clone());
        b.append(PathList::default());
        let mut empty = PathList::default();
        empty.append(a.clone());
        assert_eq!(empty, a);
        assert_eq!(b.to_vec(), ["/e/2.jpg", "/d/1.jpg", "", "/d/é.png"]);
        assert_eq!((b.len(), b.bytes(), b.is_empty()), (4, 25, false)); // é is 2 bytes
        assert_eq!(b.iter().len(), 4);
        assert!(PathList::default().is_empty());
    }

    #[test]
    #[should_panic]
    fn reading_past_the_end_panics_like_a_slice() {
        PathList::default().get(0);
    }
}
