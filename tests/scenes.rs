//! The preset scenes and `lively run`: every file in `scenes/` loads, builds and steps, and the
//! command writes the energy table it promises.

mod common;

use std::path::Path;

use lively::scene::Scene;

#[test]
fn every_preset_names_its_source_and_runs() {
    let files = common::preset_scenes();
    assert!(files.len() >= 6, "only {} presets", files.len());
    for path in files {
        let scene = Scene::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            !scene.name.is_empty() && !scene.recreates.is_empty(),
            "{}: name or recreates missing",
            path.display()
        );
        let mut sim = scene.build(None, Some("cpu")).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let start = sim.energy().total;
        for _ in 0..3 {
            scene.step(&mut sim).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        let end = sim.energy().total;
        assert!(sim.positions().iter().flatten().all(|c| c.is_finite()), "{}", path.display());
        assert!(
            end.is_finite() && end < 2.0 * start.abs() + 1.0,
            "{}: energy {start} -> {end}",
            path.display()
        );
    }
}

#[test]
fn lively_run_writes_the_energy_table() {
    let out = std::env::temp_dir().join(format!("lively-run-test-{}", std::process::id()));
    let scene = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes/stretched_bar.toml");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lively"))
        .args([
            "run",
            scene.to_str().unwrap(),
            "--steps",
            "4",
            "--backend",
            "cpu",
            "--integrator",
            "be",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = std::fs::read_to_string(out.join("energy.csv")).unwrap();
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows[0], "time,kinetic,potential,total,target,alpha,iterations,ms");
    assert_eq!(rows.len(), 1 + 1 + 4, "the start and four steps");
    // Backward Euler loses energy: the total column falls.
    let total = |row: &str| row.split(',').nth(3).unwrap().parse::<f64>().unwrap();
    assert!(total(rows[5]) < total(rows[1]), "{table}");
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(summary.contains("be on Cpu") && summary.contains("energy.csv"), "{summary}");
    std::fs::remove_dir_all(&out).ok();

    // A malformed scene is a one-line error naming the key, and a failing exit.
    let bad = std::env::temp_dir().join(format!("lively-bad-scene-{}.toml", std::process::id()));
    std::fs::write(&bad, "steps = \"many\"\n").unwrap();
    let output =
        std::process::Command::new(env!("CARGO_BIN_EXE_lively")).args(["run"]).arg(&bad).output().unwrap();
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(message.contains("steps") && message.trim().lines().count() == 1, "{message}");
    std::fs::remove_file(&bad).ok();
}

#[test]
fn lively_compare_draws_one_curve_per_integrator() {
    let out = std::env::temp_dir().join(format!("lively-compare-test-{}", std::process::id()));
    let scene = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes/stretched_bar.toml");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lively"))
        .args([
            "compare",
            scene.to_str().unwrap(),
            "--integrators",
            "be,avf",
            "--steps",
            "3",
            "--backend",
            "cpu",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = std::fs::read_to_string(out.join("compare.csv")).unwrap();
    let rows: Vec<Vec<f64>> =
        table.lines().skip(1).map(|row| row.split(',').map(|v| v.parse().unwrap()).collect()).collect();
    assert_eq!(table.lines().next(), Some("time,be,avf"));
    assert_eq!(rows.len(), 3);
    // Backward Euler loses energy; AVF keeps it to the solver tolerance.
    assert!(rows[2][1] < 0.999 && (rows[2][2] - 1.0).abs() < 1e-6, "{table}");
    let svg = std::fs::read_to_string(out.join("compare.svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("avf") && svg.contains("polyline"),
        "not a plot of the runs"
    );
    // The PNG: a real image of the plot's size, not blank.
    let png = std::fs::read(out.join("compare.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let dimension = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    assert_eq!((dimension(16), dimension(20)), (900, 620));
    assert!(png.len() > 20_000, "a {}-byte PNG is too small to hold the curves and text", png.len());
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn lively_info_reports_both_backends() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lively")).arg("info").output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(text.contains("CPU backend:") && text.contains("GPU backend:"), "{text}");
}

#[test]
fn lively_bench_prints_a_row_per_beam_and_backend() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lively"))
        .args(["bench", "--steps", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("beam ")).collect();
    assert!(rows.len() >= 2 && rows.iter().filter(|r| r.contains(" Cpu ")).count() == 2, "{text}");
    for row in rows {
        let ms: f64 = row.split_whitespace().rev().nth(2).unwrap().parse().unwrap();
        assert!(ms > 0.0 && ms.is_finite(), "{row}");
    }
}

#[test]
fn a_scene_can_collide_with_any_closed_surface_file() {
    let dir = std::env::temp_dir().join(format!("lively-surface-scene-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A closed box surface below the bar: the bar falls onto it and stays above its top.
    let mut obj = String::new();
    for b in 0..8 {
        let (x, y, z) = ((b & 1) as f64, ((b >> 1) & 1) as f64, ((b >> 2) & 1) as f64);
        obj.push_str(&format!("v {} {} {}\n", 2.0 * x - 0.5, 0.2 * y - 0.2, 2.0 * z - 0.5));
    }
    obj.push_str("f 1 3 4 2\nf 5 6 8 7\nf 1 2 6 5\nf 3 7 8 4\nf 1 5 7 3\nf 2 4 8 6\n");
    std::fs::write(dir.join("slab.obj"), obj).unwrap();
    let scene = |path: &str| {
        format!(
            "name = \"bar onto a slab\"\nrecreates = \"a test\"\nsteps = 20\nintegrator = \"be\"\n\
             gravity = [0.0, -9.81, 0.0]\n[body]\nkind = \"bar\"\ncells = [4, 2, 2]\nsize = [0.4, 0.1, 0.1]\n\
             material = \"stable-neo-hookean\"\nyoungs = 1e5\npoisson = 0.3\ndensity = 1000.0\n\
             [start]\nvelocity = [0, -1, 0]\n[[collider]]\nshape = \"surface\"\npath = \"{path}\"\nspacing = 0.02\n"
        )
    };
    std::fs::write(dir.join("ok.toml"), scene("slab.obj")).unwrap();
    let mut sim = Scene::load(dir.join("ok.toml")).unwrap().build(None, None).unwrap();
    for _ in 0..20 {
        sim.step().unwrap();
    }
    let lowest = sim.positions().iter().map(|p| p[1]).fold(f64::INFINITY, f64::min);
    assert!(lowest > -0.01 && lowest < 0.01, "the bar rests on the slab's top (y = 0), lowest {lowest}");
    std::fs::write(dir.join("missing.toml"), scene("nowhere.obj")).unwrap();
    let Err(error) = Scene::load(dir.join("missing.toml")).unwrap().build(None, None) else {
        panic!("a missing surface file must be an error");
    };
    let error = error.to_string();
    assert!(error.contains("nowhere.obj"), "{error}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_scene_handle_shakes_the_cloth_corner_and_lets_go() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes/hanging_cloth.toml");
    let scene = Scene::load(&path).unwrap();
    let handle = &scene.handle[0];
    let mut sim = scene.build(Some("be"), Some("cpu")).unwrap();
    let corner = (0..sim.positions().len())
        .min_by(|&a, &b| {
            let d = |v: usize| (0..3).map(|c| (sim.positions()[v][c] - handle.near[c]).powi(2)).sum::<f64>();
            d(a).total_cmp(&d(b))
        })
        .unwrap();
    let mut farthest: f64 = 0.0;
    while sim.time() < 0.5 {
        scene.step(&mut sim).unwrap();
        farthest = farthest.max(sim.positions()[corner][2].abs());
    }
    // The handle swings 0.25 m out of plane at 1.5 Hz; the corner follows it.
    assert!(farthest > 0.05, "the corner moved only {farthest} m out of plane");
    let booked = sim.ledger().added();
    assert!(booked != 0.0, "moving the handle must book the energy it puts in");
    // After `until` the handle has let go: the energy the user adds stops changing.
    while sim.time() < handle.until + 0.1 {
        scene.step(&mut sim).unwrap();
    }
    let after = sim.ledger().added();
    for _ in 0..3 {
        scene.step(&mut sim).unwrap();
    }
    assert_eq!(sim.ledger().added(), after, "a released handle adds no more energy");
}

#[test]
fn a_scene_names_its_outputs() {
    let dir = std::env::temp_dir().join(format!("lively-scene-outputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = "name = \"n\"\nrecreates = \"r\"\nsteps = 2\nout = \"results\"\nframes = \"obj\"\n\
                [body]\nkind = \"bar\"\ncells = [2, 1, 1]\nsize = [0.2, 0.1, 0.1]\nmaterial = \"stvk\"\n\
                youngs = 1e5\npoisson = 0.3\n";
    std::fs::write(dir.join("scene.toml"), text).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lively"))
        .args(["run"])
        .arg(dir.join("scene.toml"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // Beside the scene file, with a frame per step and the start.
    for name in ["energy.csv", "energy.png", "frame_00000.obj", "frame_00002.obj"] {
        assert!(dir.join("results").join(name).exists(), "{name} missing");
    }
    std::fs::remove_dir_all(dir).ok();
}
