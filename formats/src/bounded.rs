//! Deserializers for the manifest's lists and maps that refuse more entries than a
//! dataset can have, before they are held: the manifest's byte limit alone let a crafted
//! one of 89 million empty class names (255 MB) take gigabytes to read, or abort a process
//! under a memory limit. Used through `#[serde(deserialize_with = ...)]`.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};

/// The most classes a manifest may list: labels are below it (the converter's and the
/// writers' limit).
pub(crate) const MAX_CLASSES: usize = 1 << 20;

/// The most entries of a manifest's small maps (provenance flags, audit counts), which
/// stoker fills with a few dozen.
pub(crate) const MAX_MAP_ENTRIES: usize = 4096;

/// A class list of at most [`MAX_CLASSES`] names.
pub(crate) fn classes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_seq(Seq::<String>(MAX_CLASSES, "class names", PhantomData))
}

/// A map of at most [`MAX_MAP_ENTRIES`] entries.
pub(crate) fn map<'de, D, V>(d: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    d.deserialize_map(Map::<V>(MAX_MAP_ENTRIES, PhantomData))
}

/// Visits a list of at most `.0` items, `.1` naming them in the error.
struct Seq<T>(usize, &'static str, PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for Seq<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a list of at most {} {}", self.0, self.1)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // The hint is the caller's word, not a size to trust.
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element()? {
            if out.len() == self.0 {
                return Err(A::Error::custom(format!(
                    "more than {} {}: no dataset has that many",
                    self.0, self.1
                )));
            }
            out.push(item);
        }
        Ok(out)
    }
}

/// Visits a map of at most `.0` entries.
struct Map<V>(usize, PhantomData<V>);

impl<'de, V: Deserialize<'de>> Visitor<'de> for Map<V> {
    type Value = BTreeMap<String, V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a map of at most {} entries", self.0)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some((key, value)) = map.next_entry::<String, V>()? {
            out.insert(key, value);
            if out.len() > self.0 {
                return Err(A::Error::custom(format!(
                    "more than {} entries in a map stoker fills with a few dozen",
                    self.0
                )));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Doc {
        #[serde(deserialize_with = "classes")]
        classes: Vec<String>,
        #[serde(deserialize_with = "map")]
        flags: BTreeMap<String, String>,
    }

    #[test]
    fn lists_and_maps_past_their_bounds_are_refused_while_read() {
        let ok: Doc =
            serde_json::from_str(r#"{"classes": ["a", "b"], "flags": {"x": "1"}}"#).unwrap();
        assert_eq!((ok.classes.len(), ok.flags.len()), (2, 1));
        let names = vec![String::new(); MAX_CLASSES + 1];
        let text = format!(
            r#"{{"classes": {}, "flags": {{}}}}"#,
            serde_json::to_string(&names).unwrap()
        );
        let e = serde_json::from_str::<Doc>(&text).unwrap_err().to_string();
        assert!(e.contains("more than 1048576 class names"), "{e}");
        let at_the_bound = format!(
            r#"{{"classes": {}, "flags": {{}}}}"#,
            serde_json::to_string(&names[1..]).unwrap()
        );
        assert_eq!(
            serde_json::from_str::<Doc>(&at_the_bound)
                .unwrap()
                .classes
                .len(),
            MAX_CLASSES
        );
        let flags: BTreeMap<String, String> = (0..=MAX_MAP_ENTRIES)
            .map(|i| (i.to_string(), String::new()))
            .collect();
        let text = format!(
            r#"{{"classes": [], "flags": {}}}"#,
            serde_json::to_string(&flags).unwrap()
        );
        let e = serde_json::from_str::<Doc>(&text).unwrap_err().to_string();
        assert!(e.contains("more than 4096 entries"), "{e}");
    }
}
