//! GPU stages against their CPU twins on seeded random inputs. On a machine without an
//! adapter these tests skip with a printed reason, unless LIVELY_REQUIRE_GPU=1 (as in CI, with
//! the lavapipe software adapter), where a missing adapter is a failure.

use std::sync::Arc;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{GpuContext, GpuElements, WgElement};
use crate::backend::Node;
use crate::backend::cpu::element;
use crate::backend::cpu::tests::mixed_model;
use crate::material::{Material, Projection};
use crate::model::Model;

fn context() -> Option<GpuContext> {
    match GpuContext::new() {
        Ok(context) => Some(context),
        Err(e) if std::env::var("LIVELY_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("LIVELY_REQUIRE_GPU=1 but no GPU is usable: {e}")
        }
        Err(e) => {
            eprintln!("skipping GPU test: {e} (set LIVELY_REQUIRE_GPU=1 to make this a failure)");
            None
        }
    }
}

fn random_state(model: &Model, seed: u64) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut jitter = |p: &[f64; 3], s: f64| std::array::from_fn(|c| p[c] + rng.random_range(-s..s));
    let start: Vec<[f64; 3]> = model.rest.iter().map(|p| jitter(p, 0.01)).collect();
    let x: Vec<[f64; 3]> = start.iter().map(|p| jitter(p, 0.01)).collect();
    (x, start)
}

/// Largest |gpu - cpu| relative to the largest |cpu| entry, with its index.
fn worst(gpu: &[f32], cpu: &[f64]) -> (f64, usize) {
    assert_eq!(gpu.len(), cpu.len());
    let scale = cpu.iter().fold(f64::MIN_POSITIVE, |a, b| a.max(b.abs()));
    gpu.iter()
        .zip(cpu)
        .enumerate()
        .map(|(i, (g, c))| ((*g as f64 - c).abs() / scale, i))
        .fold((0.0, 0), |a, e| if e.0 > a.0 { e } else { a })
}

const NODES: [Node; 2] = [Node { weight: 2.0 / 3.0, theta: 0.5 }, Node { weight: 1.0 / 12.0, theta: 1.0 }];

#[test]
fn element_stage_matches_its_cpu_twin() {
    let Some(context) = context() else { return };
    let stage = WgElement::new(&context).unwrap();
    for (k, material) in
        [Material::stvk(2e4, 0.3), Material::neo_hookean(2e4, 0.3), Material::stable_neo_hookean(2e4, 0.45)]
            .into_iter()
            .enumerate()
    {
        let model = Arc::new(mixed_model(material));
        let (x, start) = random_state(&model, 40 + k as u64);
        let corners = 4 * model.tets.len() + 2 * model.springs.len();
        let blocks = 10 * model.tets.len() + 3 * model.springs.len();
        let mut cpu_gradients = vec![[0.0; 3]; corners];
        let mut cpu_blocks = vec![[0.0; 9]; blocks];
        let cpu_energy = element::derivatives(
            &model,
            &x,
            &start,
            &NODES,
            Some(Projection::None),
            &mut cpu_gradients,
            &mut cpu_blocks,
        );
        let gpu = GpuElements::new(&context, &stage, &model).unwrap();
        let out = gpu.evaluate(&context, &stage, &x, &start, &NODES, 2).unwrap();
        // f32 positions of ~0.3 m against shape gradients of ~10/m put ~2e-7 of rounding in F;
        // relative to the ~1 % strains here that is ~2e-5 at worst (measured on lavapipe:
        // 2e-6). A wrong term would be off by O(1).
        let energy_error = (out.energy - cpu_energy).abs() / cpu_energy.abs();
        assert!(energy_error < 1e-4, "material {k}: energy {} vs {cpu_energy}", out.energy);
        let (g_error, g_at) = worst(&out.corner_gradients, cpu_gradients.as_flattened());
        assert!(g_error < 1e-4, "material {k}: gradient entry {g_at} off by {g_error:e}");
        let (h_error, h_at) = worst(&out.element_blocks, cpu_blocks.as_flattened());
        assert!(h_error < 1e-4, "material {k}: Hessian entry {h_at} off by {h_error:e}");
        let energy_only = gpu.evaluate(&context, &stage, &x, &start, &NODES, 0).unwrap();
        assert_eq!(energy_only.energy, out.energy, "the energy does not depend on what else is computed");
        println!(
            "{} element parity, material {k}: energy {energy_error:.1e}, gradient {g_error:.1e}, Hessian {h_error:.1e}",
            context.adapter
        );
    }
}

#[test]
fn element_stage_gives_the_same_bits_every_run() {
    let Some(context) = context() else { return };
    let stage = WgElement::new(&context).unwrap();
    let model = Arc::new(mixed_model(Material::stable_neo_hookean(3e4, 0.4)));
    let (x, start) = random_state(&model, 7);
    let gpu = GpuElements::new(&context, &stage, &model).unwrap();
    let a = gpu.evaluate(&context, &stage, &x, &start, &NODES[..1], 2).unwrap();
    let b = gpu.evaluate(&context, &stage, &x, &start, &NODES[..1], 2).unwrap();
    assert_eq!(a.energy.to_bits(), b.energy.to_bits());
    assert_eq!(a.corner_gradients, b.corner_gradients);
    assert_eq!(a.element_blocks, b.element_blocks);
}
