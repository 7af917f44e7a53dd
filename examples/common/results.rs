//! Result rows of the device-check examples (`gpu_consumer`, `h2d_probe`): printed,
//! and appended to a TSV file as `name<TAB>value<TAB>unit<TAB>note` when one is given
//! (`scripts/device-check.sh` collects them into its table).

use std::io::Write;
use std::path::Path;

/// Where rows go: stdout, and the TSV file if any.
pub struct Table {
    file: Option<std::fs::File>,
}

impl Table {
    /// Rows to stdout, and appended to `tsv` when given (created if missing).
    pub fn open(tsv: Option<&Path>) -> std::io::Result<Table> {
        let file = match tsv {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ),
            None => None,
        };
        Ok(Table { file })
    }

    /// One result row.
    /// A value that is not a number (nothing was measured: a ratio over zero)
    /// is written `-`, and the note says so.
    ///
    /// # Errors
    ///
    /// When stdout or the TSV file cannot be written (closed pipe, full disk): a run whose
    /// rows are lost stops rather than measuring on unseen. Both are tried, so a failing
    /// TSV file still leaves the row on stdout.
    pub fn row(&mut self, name: &str, value: f64, unit: &str, note: &str) -> std::io::Result<()> {
        let (shown, note) = if value.is_finite() {
            (format!("{value:.3}"), note.to_string())
        } else {
            ("-".to_string(), format!("not measured ({value}); {note}"))
        };
        let tsv = match &mut self.file {
            Some(f) => writeln!(f, "{name}\t{shown}\t{unit}\t{note}"),
            None => Ok(()),
        };
        writeln!(
            std::io::stdout().lock(),
            "{name:<40} {shown:>14} {unit:<8} {note}"
        )?;
        tsv
    }
}
