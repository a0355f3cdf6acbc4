//! The renderer: `lively render` draws a scene into the same PNG bytes on every run, and
//! `lively view` opens a window (under Xvfb on the software Vulkan adapter in CI) whose
//! screenshot shows the body. Without an adapter the render test skips with a printed reason
//! unless LIVELY_REQUIRE_GPU=1; without `xvfb-run` the window test skips unless
//! LIVELY_REQUIRE_DISPLAY=1 (CI sets both).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lively-render-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn scene(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes").join(name)
}

/// Width, height and RGBA pixels of a PNG.
fn decode(path: &Path) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgba, "{}", path.display());
    pixels.truncate(info.buffer_size());
    (info.width, info.height, pixels)
}

/// The share of pixels in the body's colour (orange: red over green over blue; the background
/// and the colliders are blue-grey), and how many distinct shades they take: a body drawn with
/// lighting covers a part of the picture in many shades; a blank or flat picture has none or one.
fn coverage(pixels: &[u8]) -> (f64, usize) {
    let body: Vec<&[u8]> = pixels
        .chunks_exact(4)
        .filter(|p| p[0] as i32 > p[1] as i32 + 20 && p[1] as i32 > p[2] as i32 + 10)
        .collect();
    let shades: std::collections::BTreeSet<&[u8]> = body.iter().copied().collect();
    (body.len() as f64 / (pixels.len() / 4) as f64, shades.len())
}

fn lively(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lively")).args(args).output().unwrap()
}

#[test]
fn lively_render_draws_the_same_picture_every_time() {
    if common::gpu().is_none() {
        return;
    }
    let dir = scratch("frames");
    let scene = scene("twisting_bar.toml");
    let pictures: Vec<PathBuf> = ["a.png", "b.png"].iter().map(|n| dir.join(n)).collect();
    for out in &pictures {
        let output = lively(&[
            "render",
            scene.to_str().unwrap(),
            "--frame",
            "3",
            "--size",
            "320",
            "200",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let (a, b) = (std::fs::read(&pictures[0]).unwrap(), std::fs::read(&pictures[1]).unwrap());
    assert_eq!(a, b, "two renders of the same frame differ");
    let (width, height, pixels) = decode(&pictures[0]);
    assert_eq!((width, height), (320, 200));
    let (covered, shades) = coverage(&pixels);
    println!("lively render: the bar covers {:.1} % of the picture in {shades} shades", 100.0 * covered);
    assert!(covered > 0.03 && covered < 0.8 && shades > 20, "covered {covered}, {shades} shades");
    // Bad sizes are refused.
    let output = lively(&[
        "render",
        scene.to_str().unwrap(),
        "--size",
        "0",
        "200",
        "--out",
        dir.join("c.png").to_str().unwrap(),
    ]);
    assert!(!output.status.success() && String::from_utf8_lossy(&output.stderr).contains("image size"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn lively_view_opens_a_window_that_shows_the_body() {
    let required = std::env::var("LIVELY_REQUIRE_DISPLAY").as_deref() == Ok("1");
    let xvfb = Command::new("xvfb-run").arg("--help").output().is_ok();
    if !xvfb {
        assert!(!required, "LIVELY_REQUIRE_DISPLAY=1 but xvfb-run is not installed");
        eprintln!(
            "skipping the viewer test: xvfb-run is not installed (set LIVELY_REQUIRE_DISPLAY=1 to make this a failure)"
        );
        return;
    }
    let dir = scratch("window");
    let shot = dir.join("view.png");
    let output = Command::new("xvfb-run")
        .args(["-a", "-s", "-screen 0 1280x1024x24", env!("CARGO_BIN_EXE_lively"), "view"])
        .arg(scene("cube_onto_spheres.toml"))
        .args(["--screenshot", "15"])
        .arg(&shot)
        .output()
        .unwrap();
    let log =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "lively view failed: {log}");
    assert!(log.contains("frame 15 saved"), "{log}");
    let (width, height, pixels) = decode(&shot);
    let (covered, shades) = coverage(&pixels);
    println!(
        "lively view: a {width}x{height} window, the body on {:.1} % of it in {shades} shades",
        100.0 * covered
    );
    assert!(width >= 640 && height >= 400, "window {width}x{height}");
    assert!(covered > 0.01 && covered < 0.8 && shades > 20, "covered {covered}, {shades} shades");
    std::fs::remove_dir_all(dir).ok();
}
