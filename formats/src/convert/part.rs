//! Partitioned conversion: which slice of the input listing one task of a job array converts,
//! told by flags or by the launcher's variables (Slurm job arrays, Kubernetes Indexed Jobs).
//!
//! Every task lists the whole source and sorts it (and with `shuffle`, shuffles it) the
//! same way, so the class → label map and the slice boundaries agree without any
//! coordination; task `I` of `N` converts inputs
//! `[I·n/N, (I+1)·n/N)` into `OUT/part-0000I-of-0000N/`, and `merge` joins the parts.

use std::fmt::Write as _;

use crate::FormatError;

/// The most parts a conversion may be cut into (part directory names have five digits).
pub const MAX_PARTS: u32 = 99_999;

/// One part of a partitioned conversion: `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// This part, `0..count`.
    pub index: u32,
    /// Number of parts, `1..=MAX_PARTS`.
    pub count: u32,
}

impl Part {
    /// The launcher variables [`Part::from_vars`] reads, in its order: Slurm's array task
    /// and Kubernetes' Indexed Job completion index, and `STOKER_PARTS`.
    pub const ENV_VARS: [&'static str; 6] = [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_COUNT",
        "JOB_COMPLETION_INDEX",
        "STOKER_PARTS",
        "SLURM_ARRAY_TASK_MAX",
    ];

    /// Part `index` of `count`.
    ///
    /// # Errors
    ///
    /// [`FormatError::PartSelection`] unless `index < count <= MAX_PARTS`.
    ///
    /// # Examples
    ///
    /// ```
    /// let p = stoker_formats::Part::new(3, 8)?;
    /// assert_eq!(p.dir_name(), "part-00003-of-00008");
    /// assert_eq!(p.slice(100), 37..50);
    /// assert!(stoker_formats::Part::new(8, 8).is_err());
    /// # Ok::<(), stoker_formats::FormatError>(())
    /// ```
    pub fn new(index: u32, count: u32) -> Result<Part, FormatError> {
        // Not the CLI's flags: a caller of `new` may be a writer, or Python's `part=`.
        check(index, count, format!("part {index} of {count}"))
    }

    /// The part directory's name under the output root: `part-00003-of-00008`.
    pub fn dir_name(&self) -> String {
        format!("part-{:05}-of-{:05}", self.index, self.count)
    }

    /// The positions in the listing (sorted, or shuffled with `shuffle`) of `inputs` entries that this part converts.
    /// Empty for a part that [`Part::validate`] refuses (its fields are public).
    pub fn slice(&self, inputs: u64) -> std::ops::Range<u64> {
        if self.validate().is_err() {
            return 0..0;
        }
        let at = |i: u32| (u128::from(i) * u128::from(inputs) / u128::from(self.count)) as u64;
        at(self.index)..at(self.index + 1)
    }

    /// Checks a part built from its public fields (or read from a manifest) as
    /// [`Part::new`] checks its arguments.
    ///
    /// # Errors
    ///
    /// [`FormatError::PartSelection`] unless `index < count <= MAX_PARTS`.
    pub fn validate(&self) -> Result<(), FormatError> {
        Part::new(self.index, self.count).map(drop)
    }

    /// Reads the part from this process's flags and environment; see [`Part::from_vars`].
    ///
    /// # Errors
    ///
    /// As [`Part::from_vars`].
    pub fn from_env(part: Option<u32>, parts: Option<u32>) -> Result<Option<Part>, FormatError> {
        // Read lossily: a value that is not UTF-8 was taken as unset, and every task of
        // an array converted the whole dataset into one output. As U+FFFD it is refused,
        // naming it.
        Part::from_vars(part, parts, |name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// The part to convert, from the flags `--part`/`--parts` when given, else from the
    /// launcher: Slurm's `SLURM_ARRAY_TASK_ID` − `SLURM_ARRAY_TASK_MIN` of
    /// `SLURM_ARRAY_TASK_COUNT`, or Kubernetes' `JOB_COMPLETION_INDEX` of `STOKER_PARTS`
    /// (an Indexed Job does not export its completion count). `None` when nothing asks
    /// for a part: a plain conversion.
    ///
    /// # Errors
    ///
    /// [`FormatError::PartSelection`], naming the flags and variables read, when a value does
    /// not parse (an empty value is unset, as `VAR= cmd` means; blanks are a value), an index
    /// has no count (or a count no index), sources disagree, the index is not below the count,
    /// or a Slurm array numbers its tasks sparsely (a step or a list: `SLURM_ARRAY_TASK_MAX` −
    /// `_MIN` + 1 is not `_COUNT`).
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::Part;
    /// let env = |name: &str| match name {
    ///     "SLURM_ARRAY_TASK_ID" => Some("12".to_string()),
    ///     "SLURM_ARRAY_TASK_MIN" => Some("10".to_string()),
    ///     "SLURM_ARRAY_TASK_COUNT" => Some("4".to_string()),
    ///     _ => None,
    /// };
    /// assert_eq!(Part::from_vars(None, None, env)?, Some(Part { index: 2, count: 4 }));
    /// assert_eq!(Part::from_vars(None, None, |_| None)?, None);
    /// # Ok::<(), stoker_formats::FormatError>(())
    /// ```
    pub fn from_vars(
        part: Option<u32>,
        parts: Option<u32>,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Part>, FormatError> {
        let mut given = String::new();
        let mut note = |name: &str, value: &dyn std::fmt::Display| {
            let sep = if given.is_empty() { "" } else { ", " };
            let _ = write!(given, "{sep}{name}={value}");
        };
        if let Some(p) = part {
            note("--part", &p);
        }
        if let Some(n) = parts {
            note("--parts", &n);
        }
        let mut raw = Vec::new();
        for name in Part::ENV_VARS {
            let v = get(name).filter(|v| !v.is_empty());
            if let Some(v) = &v {
                note(name, v);
            }
            raw.push((name, v));
        }
        let err = |reason: String| FormatError::PartSelection {
            given: if given.is_empty() {
                "nothing set".into()
            } else {
                given.clone()
            },
            reason,
        };
        let mut vals = [None; 6];
        for (slot, (name, v)) in vals.iter_mut().zip(&raw) {
            if let Some(v) = v {
                *slot = Some(v.trim().parse::<u32>().map_err(|_| {
                    err(format!(
                        "{name}={v:?} is not an integer from 0 to {}",
                        u32::MAX
                    ))
                })?);
            }
        }
        let [slurm_id, slurm_min, slurm_count, k8s_index, stoker_parts, slurm_max] = vals;
        let slurm_index = match (slurm_id, slurm_min) {
            (Some(id), Some(min)) if id < min => {
                return Err(err(
                    "SLURM_ARRAY_TASK_ID is below SLURM_ARRAY_TASK_MIN".into()
                ))
            }
            (Some(id), min) => Some(id - min.unwrap_or(0)),
            (None, _) => None,
        };
        if part.is_none() {
            if let (Some(s), Some(k)) = (slurm_index, k8s_index) {
                if s != k {
                    return Err(err(
                        "the Slurm array task and JOB_COMPLETION_INDEX disagree; pass --part"
                            .into(),
                    ));
                }
            }
        }
        let index = part.or(slurm_index).or(k8s_index);

        if let (Some(a), Some(b)) = (parts, stoker_parts) {
            if a != b {
                return Err(err("--parts and STOKER_PARTS disagree".into()));
            }
        }
        let explicit_count = parts.or(stoker_parts);
        // The Slurm count only counts when the index comes from the same array.
        let slurm_counts = part.is_none() && slurm_index.is_some();
        if let (true, Some(c), Some(s)) = (slurm_counts, explicit_count, slurm_count) {
            if c != s {
                return Err(err(
                    "the number of parts differs from SLURM_ARRAY_TASK_COUNT (the array's size); every array task must convert one part".into(),
                ));
            }
        }
        let count = explicit_count.or(if slurm_counts { slurm_count } else { None });
        if let Some(reason) = sparse_array(slurm_counts, slurm_min, slurm_max, slurm_count) {
            return Err(err(reason));
        }

        match (index, count) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(err(
                "a number of parts but no part index: pass --part I, or run as a Slurm array task (SLURM_ARRAY_TASK_ID) or a Kubernetes Indexed Job (JOB_COMPLETION_INDEX)".into(),
            )),
            (Some(_), None) if slurm_index.is_some() && part.is_none() => Err(err(
                "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not; pass --parts N".into(),
            )),
            // The array's count goes with its own index, not with one given beside it.
            (Some(_), None) if slurm_index.is_some() => Err(err(
                "a part index but no number of parts: pass --parts N too, or leave --part out for the Slurm array task's own index and count".into(),
            )),
            (Some(_), None) => Err(err(
                "a part index but no number of parts: pass --parts N or set STOKER_PARTS (a Kubernetes Indexed Job's completions)".into(),
            )),
            (Some(i), Some(n)) => {
                let sparse = if slurm_counts && n > 0 && i >= n {
                    " (a Slurm array with a step or a list, e.g. --array=0-15:4, numbers its tasks sparsely: pass --part and --parts)"
                } else {
                    ""
                };
                check(i, n, given.clone())
                    .map(Some)
                    .map_err(|e| match e {
                        FormatError::PartSelection { given, reason } => {
                            FormatError::PartSelection {
                                given,
                                reason: format!("{reason}{sparse}"),
                            }
                        }
                        e => e,
                    })
            }
        }
    }
}

/// Why a Slurm array cannot give the parts (its task ids from `min` to `max` are not its
/// `count` tasks), when the part comes from it (`from_array`); not for a count of 0, wrong
/// in itself (nor is the hint added to [`check`]'s error then). A step or a list
/// (`--array=0-6:2`, `--array=1,5,9`) numbers the tasks sparsely: some tasks' indices
/// reached past the count and failed, the others converted, and the merge then found
/// parts missing. Refused in every task, before any work.
fn sparse_array(
    from_array: bool,
    min: Option<u32>,
    max: Option<u32>,
    count: Option<u32>,
) -> Option<String> {
    let (true, Some(min), Some(max), Some(n @ 1..)) = (from_array, min, max, count) else {
        return None;
    };
    let ids = u64::from(max).checked_sub(u64::from(min)).map(|d| d + 1);
    (ids != Some(u64::from(n))).then(|| {
        format!(
            "the Slurm array's task ids run from {min} to {max} but it has {n} tasks: a step or a list (e.g. --array=0-15:4) numbers them sparsely, and every part must be one task's; submit a contiguous array (--array=0-{}), or pass --part and --parts",
            n.saturating_sub(1)
        )
    })
}

/// `(index, count)` of a part directory's name, `part-IIIII-of-NNNNN` ([`Part::dir_name`]).
pub(crate) fn parse_dir_name(name: &str) -> Option<(u64, u64)> {
    let (index, count) = name.strip_prefix("part-")?.split_once("-of-")?;
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    Some((number(index)?, number(count)?))
}

fn check(index: u32, count: u32, given: String) -> Result<Part, FormatError> {
    let reason = if count == 0 {
        "the number of parts must be positive".to_string()
    } else if count > MAX_PARTS {
        format!("at most {MAX_PARTS} parts")
    } else if index >= count {
        format!("part index {index} is not below the number of parts {count}")
    } else {
        return Ok(Part { index, count });
    };
    Err(FormatError::PartSelection { given, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(
        part: Option<u32>,
        parts: Option<u32>,
        vars: &[(&str, &str)],
    ) -> Result<Option<Part>, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Part::from_vars(part, parts, |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn a_part_directory_name_gives_its_index_and_count_back() {
        let p = Part::new(3, 8).unwrap();
        assert_eq!(parse_dir_name(&p.dir_name()), Some((3, 8)));
        assert_eq!(
            parse_dir_name("part-123456-of-200000"),
            Some((123_456, 200_000))
        );
        for other in [
            "part--of-8",
            "part-3-of-",
            "part-3-of-8x",
            ".part-00003-of-00008.claim-1-0",
            "part-+3-of-8",
            "shard-00000.lmdb",
        ] {
            assert_eq!(parse_dir_name(other), None, "{other}");
        }
    }

    #[test]
    fn slices_cover_the_listing_once_in_order() {
        for n in [0u64, 1, 7, 164, 1000] {
            for count in [1u32, 2, 3, 4, 8, 200] {
                let mut next = 0;
                for index in 0..count {
                    let s = Part { index, count }.slice(n);
                    assert_eq!(s.start, next);
                    next = s.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn flags_slurm_and_kubernetes_give_the_part() {
        assert_eq!(
            from(Some(1), Some(4), &[]),
            Ok(Some(Part { index: 1, count: 4 }))
        );
        assert_eq!(from(None, None, &[]), Ok(None));
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(
            from(None, None, &slurm),
            Ok(Some(Part { index: 3, count: 4 }))
        );
        // Flags win over the array's numbering.
        assert_eq!(
            from(Some(0), Some(2), &slurm),
            Ok(Some(Part { index: 0, count: 2 }))
        );
        // --part alone in an array task: the array's count is not --part's, and the
        // Kubernetes variable the other message names has nothing to do with Slurm.
        let e = from(Some(1), None, &slurm).unwrap_err();
        assert!(e.contains("--parts N too, or leave --part out"), "{e}");
        assert!(!e.contains("STOKER_PARTS"), "{e}");
        let k8s = [("JOB_COMPLETION_INDEX", "2"), ("STOKER_PARTS", "3")];
        assert_eq!(
            from(None, None, &k8s),
            Ok(Some(Part { index: 2, count: 3 }))
        );
        assert_eq!(
            from(None, Some(3), &[("JOB_COMPLETION_INDEX", "0")]),
            Ok(Some(Part { index: 0, count: 3 }))
        );
    }

    #[test]
    fn inconsistent_launcher_variables_are_refused_naming_them() {
        let e = from(None, None, &[("JOB_COMPLETION_INDEX", "2")]).unwrap_err();
        assert!(
            e.contains("STOKER_PARTS") && e.contains("JOB_COMPLETION_INDEX=2"),
            "{e}"
        );
        let e = from(
            None,
            None,
            &[
                ("SLURM_ARRAY_TASK_ID", "8"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ],
        )
        .unwrap_err();
        assert!(
            e.contains("SLURM_ARRAY_TASK_ID=8") && e.contains("sparsely"),
            "{e}"
        );
        let e = from(
            None,
            Some(8),
            &[
                ("SLURM_ARRAY_TASK_ID", "1"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ],
        )
        .unwrap_err();
        assert!(e.contains("SLURM_ARRAY_TASK_COUNT"), "{e}");
        // A count of 0 is wrong in itself: no hint of a sparse array, with or without
        // the array's bounds.
        for bounds in [
            &[][..],
            &[("SLURM_ARRAY_TASK_MIN", "0"), ("SLURM_ARRAY_TASK_MAX", "3")],
        ] {
            let mut vars = vec![
                ("SLURM_ARRAY_TASK_ID", "0"),
                ("SLURM_ARRAY_TASK_COUNT", "0"),
            ];
            vars.extend_from_slice(bounds);
            let e = from(None, None, &vars).unwrap_err();
            assert!(
                e.contains("must be positive") && !e.contains("sparse"),
                "{e}"
            );
        }
        let e = from(None, None, &[("STOKER_PARTS", "x")]).unwrap_err();
        assert!(e.contains("STOKER_PARTS=\"x\""), "{e}");
        // A non-negative integer, but too large: not called "not a non-negative integer".
        let e = from(None, None, &[("STOKER_PARTS", "99999999999")]).unwrap_err();
        assert!(e.contains("from 0 to 4294967295"), "{e}");
        let e = from(None, Some(4), &[]).unwrap_err();
        assert!(e.contains("no part index"), "{e}");
        let e = from(Some(4), Some(4), &[]).unwrap_err();
        assert!(e.contains("not below"), "{e}");
        let e = from(
            None,
            None,
            &[
                ("SLURM_ARRAY_TASK_ID", "1"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
                ("JOB_COMPLETION_INDEX", "2"),
            ],
        )
        .unwrap_err();
        assert!(e.contains("disagree"), "{e}");
    }

    #[test]
    fn a_slurm_array_with_a_step_or_a_list_is_refused_in_every_task() {
        // --array=0-6:2: ids 0, 2, 4, 6 of 4 tasks. Tasks 0 and 2 converted parts 0 and 2,
        // 4 and 6 failed, and the merge found parts 1 and 3 missing.
        for id in ["0", "2", "4", "6"] {
            let e = from(
                None,
                None,
                &[
                    ("SLURM_ARRAY_TASK_ID", id),
                    ("SLURM_ARRAY_TASK_MIN", "0"),
                    ("SLURM_ARRAY_TASK_MAX", "6"),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                ],
            )
            .unwrap_err();
            assert!(
                e.contains("from 0 to 6 but it has 4 tasks") && e.contains("--array=0-3"),
                "{e}"
            );
        }
        // A contiguous array, also one that starts past 0; flags ignore the array.
        let contiguous = [
            ("SLURM_ARRAY_TASK_ID", "12"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_MAX", "13"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(
            from(None, None, &contiguous),
            Ok(Some(Part { index: 2, count: 4 }))
        );
        let sparse = [
            ("SLURM_ARRAY_TASK_ID", "4"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "6"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(
            from(Some(1), Some(4), &sparse),
            Ok(Some(Part { index: 1, count: 4 }))
        );
    }
}
