//! Property tests of scene files (proptest): every preset in `scenes/` with one of its numbers
//! replaced by a hostile value (zero, negative, tiny, huge, not a number, infinite, or out of an
//! integer's range). Whatever the value, reading the scene never panics; a scene that reads
//! builds or refuses; and its first steps either leave a finite state or fail leaving the state
//! as it was. A value that would make a mesh too large for memory must be refused, not tried.
//! 200 cases, the same on every run; `PROPTEST_CASES` and `PROPTEST_RNG_SEED` draw more or
//! others.

mod common;

use lively::scene::Scene;
use proptest::prelude::*;

/// Every preset's file and text.
fn presets() -> Vec<(String, String)> {
    let files = common::preset_scenes();
    files.iter().map(|path| (path.display().to_string(), std::fs::read_to_string(path).unwrap())).collect()
}

const HOSTILE: [&str; 14] = [
    "0",
    "-1",
    "-0.0",
    "1e-300",
    "1e300",
    "-1e300",
    "nan",
    "inf",
    "-inf",
    "0.5",
    "2",
    "1e9",
    "4294967296",
    "18446744073709551616",
];

/// Byte ranges of the numbers in `text` outside strings and comments (a digit, with its sign,
/// point, exponent and underscores).
fn numbers(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (line_start, line) in text.split_inclusive('\n').scan(0, |at, line| {
        let start = *at;
        *at += line.len();
        Some((start, line))
    }) {
        let code = line.split('#').next().unwrap_or("");
        // Numbers are values: after the `=`, outside quotes.
        let Some(equals) = code.find('=') else { continue };
        let bytes = code.as_bytes();
        let mut i = equals + 1;
        let mut quoted = false;
        while i < bytes.len() {
            let c = bytes[i] as char;
            if c == '"' {
                quoted = !quoted;
            }
            let starts = !quoted
                && (c.is_ascii_digit()
                    || ((c == '-' || c == '+') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)));
            if starts {
                let begin = i;
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || b"._+-".contains(&bytes[i])) {
                    i += 1;
                }
                out.push((line_start + begin, line_start + i));
            } else {
                i += 1;
            }
        }
    }
    out
}

/// Every number of every preset: its file, its text and its byte range.
fn every_number() -> Vec<(String, String, usize, usize)> {
    let mut out = Vec::new();
    for (path, text) in presets() {
        for (begin, end) in numbers(&text) {
            out.push((path.clone(), text[begin..end].to_string(), begin, end));
        }
    }
    out
}

fn finite(vectors: &[[f64; 3]]) -> bool {
    vectors.iter().flatten().all(|c| c.is_finite())
}

proptest! {
    #![proptest_config(common::property_config(200))]
    #[test]
    fn a_preset_with_a_hostile_number_reads_builds_and_steps_or_refuses(
        (path, token, begin, end) in prop::sample::select(every_number()),
        value in prop::sample::select(HOSTILE.to_vec()),
    ) {
        let text = std::fs::read_to_string(&path).unwrap();
        let changed = format!("{}{value}{}", &text[..begin], &text[end..]);
        let what = format!("{path}: `{token}` -> `{value}`");
        let Ok(scene) = Scene::parse(&changed) else { return Ok(()) };
        let Ok(mut sim) = scene.build(None, Some("cpu")) else { return Ok(()) };
        prop_assert!(finite(sim.positions()) && finite(sim.velocities()), "{what}: non-finite start");
        for step in 0..2 {
            let before = (sim.positions().to_vec(), sim.velocities().to_vec(), sim.time());
            match scene.step(&mut sim) {
                Ok(_) => prop_assert!(
                    finite(sim.positions()) && finite(sim.velocities()) && sim.energy().total.is_finite(),
                    "{what}: step {step} left a non-finite state"
                ),
                Err(e) => {
                    let after = (sim.positions().to_vec(), sim.velocities().to_vec(), sim.time());
                    prop_assert!(after == before, "{what}: step {step} failed ({e}) and changed the state");
                    break;
                }
            }
        }
    }
}

#[test]
fn every_preset_has_numbers_to_change() {
    for (path, text) in presets() {
        let spans = numbers(&text);
        assert!(spans.len() >= 3, "{path}: {spans:?}");
        for (begin, end) in spans {
            let token = &text[begin..end];
            assert!(
                token.parse::<f64>().is_ok() || token.replace('_', "").parse::<f64>().is_ok(),
                "{path}: `{token}`"
            );
        }
    }
}
