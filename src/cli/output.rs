//! Printing answers: aligned columns for people, JSON for scripts. A reader that stops
//! early (`icefeed tables list | head -1`) ends the output quietly.
//! Must not reach: the rest of the crate.

use std::io::Write;

use serde_json::Value;

/// Writes `text` to stdout; a closed pipe ends the process quietly, like other tools.
pub fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        panic!("writing to stdout: {e}");
    }
}

pub fn print_json(value: &Value) {
    print(&format!(
        "{}\n",
        serde_json::to_string_pretty(value).expect("JSON serializes")
    ));
}

/// Rows under a header, each column as wide as its widest cell.
pub fn print_rows(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        text.trim_end().to_string() + "\n"
    };
    let mut text = line(header.to_vec());
    for row in rows {
        text.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    print(&text);
}
