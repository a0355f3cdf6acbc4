//! Finite-difference checks of every material and spring kind at seeded random deformations.

use glam::{DMat3, DVec3};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::math::{Mat9, flat, smallest_eigenvalue, unvec9, vec9};
use crate::mesh::SpringKind;

/// O(1) Lame parameters keep the finite-difference error budget easy to reason about.
fn evaluator(model: MaterialModel) -> Elastic {
    Material::lame(model, 1.3, 2.1).elastic().unwrap()
}

/// Deformation gradients near and far from rest; inverted ones where the model allows them.
fn random_deformations(model: MaterialModel, count: usize, seed: u64) -> Vec<DMat3> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    while out.len() < count {
        let scale = [0.1, 0.5, 1.0][out.len() % 3];
        let mut f = DMat3::IDENTITY
            + DMat3::from_cols_array(&std::array::from_fn(|_| rng.random_range(-scale..scale)));
        // Neo-Hookean is undefined for J <= 0, so it gets no inverted samples.
        let inverted = out.len() % 4 == 3 && model != MaterialModel::NeoHookean;
        if inverted {
            f.z_axis = -f.z_axis;
        }
        let j = f.determinant();
        let allowed = match model {
            MaterialModel::NeoHookean => j > 0.2,
            _ => j.abs() > 0.05,
        };
        // Stay clear of the twist singularity of the rotation family (s_i + s_j = 0).
        let (_, s, _) = crate::math::signed_svd(&f);
        if allowed && (s.y + s.z).abs() > 0.05 {
            out.push(f);
        }
    }
    out
}

/// Largest entry of `|a - b|` relative to `max(1, |a|)`, with the index where it happens.
fn worst_relative(a: &[f64], b: &[f64]) -> (f64, usize) {
    let scale = a.iter().map(|x| x.abs()).fold(1.0, f64::max);
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(i, (x, y))| ((x - y).abs() / scale, i))
        .fold((0.0, 0), |acc, e| if e.0 > acc.0 { e } else { acc })
}

// Central differences with step 1e-6 on O(1) quantities: truncation ~1e-12, round-off
// ~1e-16/1e-6 = 1e-10, so 1e-6 relative is a wide but still sharp margin.
const FD_STEP: f64 = 1e-6;
const FD_TOLERANCE: f64 = 1e-6;

#[test]
fn stress_is_the_energy_gradient() {
    for model in MaterialModel::ALL {
        let m = evaluator(model);
        for (n, f) in random_deformations(model, 60, 1).iter().enumerate() {
            let p = vec9(&m.stress(f));
            let base = vec9(f);
            let fd: Vec<f64> = (0..9)
                .map(|r| {
                    let (mut a, mut b) = (base, base);
                    a[r] += FD_STEP;
                    b[r] -= FD_STEP;
                    (m.energy(&unvec9(&a)) - m.energy(&unvec9(&b))) / (2.0 * FD_STEP)
                })
                .collect();
            let (err, at) = worst_relative(&p, &fd);
            assert!(err < FD_TOLERANCE, "{model:?} sample {n}: P vs FD error {err:e} at entry {at}");
        }
    }
}

fn assert_tangent_matches_fd(m: &Elastic, f: &DMat3, k: &Mat9, label: &str) {
    let base = vec9(f);
    for c in 0..9 {
        let (mut a, mut b) = (base, base);
        a[c] += FD_STEP;
        b[c] -= FD_STEP;
        let pa = vec9(&m.stress(&unvec9(&a)));
        let pb = vec9(&m.stress(&unvec9(&b)));
        let fd: Vec<f64> = (0..9).map(|r| (pa[r] - pb[r]) / (2.0 * FD_STEP)).collect();
        let column: Vec<f64> = (0..9).map(|r| k[r][c]).collect();
        let (err, at) = worst_relative(&column, &fd);
        assert!(err < FD_TOLERANCE, "{label}: dP/dF column {c} row {at} off by {err:e}");
    }
}

#[test]
fn stress_derivative_is_the_stress_jacobian() {
    for model in MaterialModel::ALL {
        let m = evaluator(model);
        for (n, f) in random_deformations(model, 60, 2).iter().enumerate() {
            let k = m.stress_derivative(f, Projection::None);
            assert_tangent_matches_fd(&m, f, &k, &format!("{model:?} sample {n}"));
        }
    }
}

#[test]
fn eigensystem_agrees_with_polynomial_forms() {
    // StVK and both neo-Hookeans are evaluated from F on the hot path; their stretch forms
    // (used for the PSD projection) must describe the same function.
    for model in [MaterialModel::StVK, MaterialModel::NeoHookean, MaterialModel::StableNeoHookean] {
        let m = evaluator(model);
        for f in random_deformations(model, 30, 3) {
            let (u, s, v) = crate::math::signed_svd(&f);
            let e_stretch = m.stretch_energy(s);
            assert!((e_stretch - m.energy(&f)).abs() < 1e-10 * (1.0 + m.energy(&f).abs()));
            let k_poly = m.stress_derivative(&f, Projection::None);
            let mut k_eig = [[0.0; 9]; 9];
            m.eigensystem_tangent(&u, s, &v, Projection::None, &mut k_eig);
            let (err, at) = worst_relative(&k_poly.concat(), &k_eig.concat());
            // Both are analytic; agreement is limited by the SVD's round-off.
            assert!(err < 1e-9, "{model:?}: tangent forms differ by {err:e} at {at}");
        }
    }
}

#[test]
fn corotated_closed_form_agrees_with_the_eigensystem() {
    // Corotated and ARAP take their true tangent from the polar rotation's derivative on the
    // hot path; the eigensystem (used for the projection) must describe the same tangent, and
    // `evaluate` must give the same energy and stress as the SVD forms.
    for model in [MaterialModel::Corotated, MaterialModel::Arap] {
        let m = evaluator(model);
        let mut closed_forms = 0;
        for f in random_deformations(model, 60, 4) {
            let (u, s, v) = crate::math::signed_svd(&f);
            let mut k_eig = [[0.0; 9]; 9];
            m.eigensystem_tangent(&u, s, &v, Projection::None, &mut k_eig);
            let mut rotation = glam::DQuat::IDENTITY;
            let mut k = [[0.0; 9]; 9];
            let (energy, stress) = m.evaluate(
                &f,
                &mut rotation,
                RotationSearch::Converged,
                true,
                Some((Projection::None, &mut k)),
            );
            // Warm-started from the rotation it returned (and from a nearby one), the same values,
            // even with one rotation step asked: a tangent converges the rotation anyway.
            for warm in [rotation, rotation * glam::DQuat::from_rotation_y(0.2)] {
                let mut warm = warm;
                let mut kw = [[0.0; 9]; 9];
                let tangent = Some((Projection::None, &mut kw));
                let (e, p) = m.evaluate(&f, &mut warm, RotationSearch::OneStep, true, tangent);
                assert!(
                    (e - energy).abs() <= 1e-12 * (1.0 + energy.abs()),
                    "{model:?}: warm energy {e} vs {energy}"
                );
                let (err, _) = worst_relative(&p.unwrap().to_cols_array(), &stress.unwrap().to_cols_array());
                assert!(err < 1e-10, "{model:?}: warm stress off by {err:e}");
                let (err, _) = worst_relative(&kw.concat(), &k.concat());
                assert!(err < 1e-9, "{model:?}: warm tangent off by {err:e}");
            }
            let (err, at) = worst_relative(&k.concat(), &k_eig.concat());
            assert!(err < 1e-9, "{model:?}: tangent forms differ by {err:e} at {at}");
            assert!((energy - m.stretch_energy(s)).abs() < 1e-12 * (1.0 + energy.abs()));
            let (err, at) = worst_relative(&stress.unwrap().to_cols_array(), &m.stress(&f).to_cols_array());
            assert!(err < 1e-10, "{model:?}: stresses differ by {err:e} at {at}");
            let (_, r) = crate::material::closest_rotation(&f, glam::DQuat::IDENTITY);
            closed_forms += m.corotated_tangent(&f, &r, &mut [[0.0; 9]; 9]) as usize;
        }
        // Only flat or half-inverted samples leave the closed form.
        assert!(closed_forms >= 50, "{model:?}: closed form used for {closed_forms} of 60");
    }
}

#[test]
fn projected_derivative_is_psd_and_exact_when_already_psd() {
    for model in MaterialModel::ALL {
        let m = evaluator(model);
        for f in random_deformations(model, 60, 4) {
            let exact = m.stress_derivative(&f, Projection::None);
            let projected = m.stress_derivative(&f, Projection::Psd);
            let rows = |k: &Mat9| k.iter().map(|r| r.to_vec()).collect::<Vec<_>>();
            let min_projected = smallest_eigenvalue(&rows(&projected));
            // Projected eigenvalues are magnitudes, never negative; reassembly round-off is ~1e-13
            // of O(10) entries.
            assert!(min_projected > -1e-9, "{model:?}: projected tangent has eigenvalue {min_projected:e}");
            if smallest_eigenvalue(&rows(&exact)) > 1e-8 {
                let (err, at) = worst_relative(&exact.concat(), &projected.concat());
                assert!(err < 1e-9, "{model:?}: projection changed a PSD tangent by {err:e} at {at}");
            }
        }
    }
}

#[test]
fn rest_shape_has_zero_energy_and_stress() {
    for model in MaterialModel::ALL {
        let m = evaluator(model);
        assert!(m.energy(&DMat3::IDENTITY).abs() < 1e-14, "{model:?} rest energy");
        let p = vec9(&m.stress(&DMat3::IDENTITY));
        assert!(p.iter().all(|x| x.abs() < 1e-13), "{model:?} rest stress {p:?}");
    }
}

#[test]
fn rotations_cost_nothing() {
    let r = DMat3::from_axis_angle(DVec3::new(1.0, 2.0, 3.0).normalize(), 1.1);
    for model in MaterialModel::ALL {
        let m = evaluator(model);
        assert!(m.energy(&r).abs() < 1e-12, "{model:?} energy of a rotation");
    }
}

#[test]
fn small_strain_matches_linear_elasticity() {
    // Every model is parametrised so that (E, nu) mean the same thing at small strain.
    let strain = 1e-5;
    let f = DMat3::from_diagonal(DVec3::new(1.0 + strain, 1.0, 1.0));
    let (youngs, poisson) = (1e5, 0.3);
    for model in MaterialModel::ALL {
        let material = match model {
            MaterialModel::Arap => continue,
            _ => Material { model, parameters: Parameters::Engineering { youngs, poisson } },
        };
        let (mu, lambda) = material.lame_parameters().unwrap();
        let p = material.elastic().unwrap().stress(&f);
        let expected = (2.0 * mu + lambda) * strain;
        let got = crate::math::at(&p, 0, 0);
        // First-order agreement: the relative difference is O(strain).
        assert!((got - expected).abs() < 1e-4 * expected, "{model:?}: P00 {got} vs {expected}");
    }
}

#[test]
fn inverted_neo_hookean_is_infinite() {
    let m = evaluator(MaterialModel::NeoHookean);
    let f = DMat3::from_diagonal(DVec3::new(1.0, 1.0, -0.5));
    assert_eq!(m.energy(&f), f64::INFINITY);
    // Stable neo-Hookean and fixed corotated push inverted elements back with finite energy.
    for model in [MaterialModel::StableNeoHookean, MaterialModel::FixedCorotated] {
        let e = evaluator(model).energy(&f);
        assert!(e.is_finite() && e > 0.0, "{model:?} energy {e}");
    }
}

/// Where neo-Hookean's energy is finite, so are its stress, tangent and stretch derivatives,
/// down to elements flattened to round-off: `J` is taken the same way everywhere. (A
/// determinant taken apart from the energy's `J - 1` rounds to zero or below on some of these,
/// and made the next step's forces NaN after a solve had ended on such an element.)
#[test]
fn nearly_flat_neo_hookean_elements_have_finite_derivatives_where_their_energy_is_finite() {
    use crate::material::stretch::sym_coordinates;
    let m = evaluator(MaterialModel::NeoHookean);
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let (mut finite, mut determinant_not_positive) = (0, 0);
    for _ in 0..2000 {
        let mut rotation = || {
            let axis = DVec3::new(rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0), 1.0).normalize();
            DMat3::from_axis_angle(axis, rng.random_range(0.0..std::f64::consts::PI))
        };
        let (u, v) = (rotation(), rotation());
        let flat = 10f64.powf(rng.random_range(-17.0..-14.0));
        let f = u * DMat3::from_diagonal(DVec3::new(1.5, 0.8, flat)) * v.transpose();
        let energy = m.energy(&f);
        if !energy.is_finite() {
            continue;
        }
        finite += 1;
        determinant_not_positive += usize::from(f.determinant() <= 0.0);
        let stress = m.stress(&f);
        let tangent = m.stress_derivative(&f, Projection::None);
        assert!(stress.is_finite(), "stress at {f:?}: {stress:?}");
        assert!(tangent.iter().flatten().all(|k| k.is_finite()), "tangent at {f:?}");
        // The same element's symmetric stretch, as the mixed solver sees it.
        let (_, s, w) = crate::math::signed_svd(&f);
        let stretch = sym_coordinates(&(w * DMat3::from_diagonal(s) * w.transpose()));
        if m.symmetric_energy(&stretch).is_finite() {
            let d = m.symmetric_derivatives(&stretch, Some(Projection::None));
            assert!(
                d.gradient.iter().chain(d.hessian.iter().flatten()).all(|x| x.is_finite()),
                "at {stretch:?}"
            );
        }
    }
    assert!(finite > 100, "only {finite} of the flat elements have a finite energy");
    assert!(determinant_not_positive > 0, "no sample where a separate determinant rounds to zero or below");
}

#[test]
fn bad_parameters_are_rejected_with_their_name() {
    let cases = [
        (Material::stvk(1e5, 0.5), "Poisson"),
        (Material::stvk(1e5, -1.0), "Poisson"),
        (Material::neo_hookean(-1.0, 0.3), "Young"),
        (Material::corotated(f64::NAN, 0.3), "Young"),
        (Material::lame(MaterialModel::StVK, 0.0, 1.0), "mu"),
        (Material::lame(MaterialModel::StVK, 1.0, -1.0), "lambda"),
        (Material::fixed_corotated(1e5, -0.1), "no minimum"),
        (Material::neo_hookean(1e5, -0.1), "no minimum"),
        (Material::lame(MaterialModel::NeoHookean, 1.0, -0.5), "no minimum"),
    ];
    for (material, needle) in cases {
        let message = material.lame_parameters().unwrap_err().to_string();
        assert!(message.contains(needle), "message {message:?} should name {needle}");
    }
}

/// Why a negative `lambda` is refused for two models and not the others: along uniform
/// scalings from 1e-30 to 1e3 (and their inversions), at a `lambda` just above the stable
/// bound `-2/3 mu`, the refused models' energies fall far below their rest energy of zero
/// (neo-Hookean's as `(ln J)^2`, so slowly, and only until `J - 1` rounds to -1, where it
/// reads as inverted) while the others' stay above `-mu` (stable neo-Hookean's reaches
/// `lambda/2` at `F = 0`; the rest are non-negative).
#[test]
fn negative_lambda_is_refused_exactly_where_the_energy_has_no_minimum() {
    let (mu, lambda) = (1.0, -0.6);
    for model in MaterialModel::ALL {
        let elastic = Elastic::new(model, mu, lambda);
        let lowest = (-3000..=300)
            .map(|k| 10f64.powf(k as f64 / 100.0))
            .flat_map(|s| [DMat3::from_diagonal(DVec3::splat(s)), DMat3::from_diagonal(DVec3::new(s, s, -s))])
            .map(|f| elastic.energy(&f))
            .fold(f64::INFINITY, f64::min);
        let refused = Material::lame(model, mu, lambda).lame_parameters().is_err();
        if refused {
            assert!(lowest < -100.0 * mu, "{model:?} is refused but its lowest energy is {lowest}");
        } else {
            assert!(lowest >= -mu, "{model:?} is accepted but its energy falls to {lowest}");
        }
        let expect_refused = matches!(model, MaterialModel::FixedCorotated | MaterialModel::NeoHookean);
        assert_eq!(refused, expect_refused, "{model:?}");
    }
}

#[test]
fn springs_match_finite_differences() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for kind in [SpringKind::Hooke, SpringKind::StVK] {
        for n in 0..200 {
            let law = SpringLaw { kind, stiffness: 3.0, rest: rng.random_range(0.5..1.5) };
            let d = DVec3::new(
                rng.random_range(-2.0..2.0),
                rng.random_range(-2.0..2.0),
                rng.random_range(-2.0..2.0),
            );
            let g = law.gradient(d);
            let h = law.hessian(d, Projection::None);
            for c in 0..3 {
                let mut e = DVec3::ZERO;
                e[c] = FD_STEP;
                let fd_g = (law.energy(d + e) - law.energy(d - e)) / (2.0 * FD_STEP);
                let fd_h = (law.gradient(d + e) - law.gradient(d - e)) / (2.0 * FD_STEP);
                let scale = 1.0 + g.abs().max_element();
                assert!((fd_g - g[c]).abs() < FD_TOLERANCE * scale, "{kind:?} {n}: gradient {c}");
                let scale = 1.0 + h.abs().to_cols_array().iter().fold(0.0_f64, |a, b| a.max(*b));
                let err = (fd_h - h.col(c)).abs().max_element();
                assert!(err < FD_TOLERANCE * scale, "{kind:?} {n}: Hessian column {c} off by {err:e}");
            }
            let p = law.hessian(d, Projection::Psd);
            let rows: Vec<Vec<f64>> = (0..3).map(|i| (0..3).map(|j| p.col(j)[i]).collect()).collect();
            assert!(smallest_eigenvalue(&rows) > -1e-12, "{kind:?}: projected spring Hessian not PSD");
        }
        let law = SpringLaw { kind, stiffness: 3.0, rest: 1.0 };
        assert_eq!(law.energy(DVec3::new(0.6, 0.8, 0.0)), 0.0);
        assert_eq!(law.gradient(DVec3::new(0.6, 0.8, 0.0)), DVec3::ZERO);
    }
}

#[test]
fn flat_index_is_row_major() {
    let m = crate::math::from_rows([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]);
    assert_eq!(vec9(&m)[flat(1, 2)], 6.0);
}

#[test]
fn energy_is_accurate_at_tiny_strain() {
    // Near rest psi(I + d) = 1/2 d:K:d. With strains of 1e-7 the energy is ~1e-14 of the
    // moduli; a form that cancels O(1) terms would leave only rounding (~1e-16) behind.
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    for model in MaterialModel::ALL {
        let m = evaluator(model);
        let k = m.stress_derivative(&DMat3::IDENTITY, Projection::None);
        for _ in 0..20 {
            let d: [f64; 9] = std::array::from_fn(|_| rng.random_range(-1e-7..1e-7));
            let expected = 0.5 * crate::math::quadratic9(&k, &d, &d);
            let f = unvec9(&std::array::from_fn(|i| d[i] + if i % 4 == 0 { 1.0 } else { 0.0 }));
            let got = m.energy(&f);
            // Third-order terms are 1e-7 relative; rounding of F itself (1e-16 / 1e-7) 1e-9.
            assert!((got - expected).abs() <= 1e-5 * expected.abs(), "{model:?}: {got:e} vs {expected:e}");
        }
    }
}

mod symmetric_stretch {
    //! The materials in the symmetric stretch of the mixed solver, against their forms in `F`.

    use super::*;
    use crate::material::stretch::{Sym6, polar_stretch, sym_coordinates, sym_matrix};

    /// Symmetric stretches near and far from rest, inverted ones where the model allows.
    fn stretches(model: MaterialModel, seed: u64) -> Vec<Sym6> {
        random_deformations(model, 40, seed)
            .iter()
            .map(|f| polar_stretch(f, &mut { glam::DQuat::IDENTITY }).0)
            .collect()
    }

    #[test]
    fn energy_in_the_stretch_is_the_energy_in_f() {
        for model in MaterialModel::ALL {
            let m = evaluator(model);
            for (n, f) in random_deformations(model, 60, 11).iter().enumerate() {
                let (s, _) = polar_stretch(f, &mut { glam::DQuat::IDENTITY });
                let (a, b) = (m.symmetric_energy(&s), m.energy(f));
                assert!((a - b).abs() <= 1e-10 * (1.0 + b.abs()), "{model:?} sample {n}: {a} vs {b}");
                // S = R^T F is symmetric: its coordinates give back F with the rotation.
                let (_, r) = closest_rotation(f, glam::DQuat::IDENTITY);
                let back = r * sym_matrix(&s);
                let (err, _) = worst_relative(&vec9(f), &vec9(&back));
                assert!(err < 1e-12, "{model:?} sample {n}: R S differs from F by {err:e}");
            }
        }
    }

    #[test]
    fn gradient_and_hessian_match_finite_differences() {
        for model in MaterialModel::ALL {
            let m = evaluator(model);
            for (n, s) in stretches(model, 12).iter().enumerate() {
                let d = m.symmetric_derivatives(s, Some(Projection::None));
                let shifted = |k: usize, h: f64| {
                    let mut t = *s;
                    t[k] += h;
                    t
                };
                let fd: Vec<f64> = (0..6)
                    .map(|k| {
                        (m.symmetric_energy(&shifted(k, FD_STEP)) - m.symmetric_energy(&shifted(k, -FD_STEP)))
                            / (2.0 * FD_STEP)
                    })
                    .collect();
                let (err, at) = worst_relative(&d.gradient, &fd);
                assert!(err < FD_TOLERANCE, "{model:?} sample {n}: gradient off by {err:e} at {at}");
                for k in 0..6 {
                    let (a, b) = (
                        m.symmetric_derivatives(&shifted(k, FD_STEP), Some(Projection::None)).gradient,
                        m.symmetric_derivatives(&shifted(k, -FD_STEP), Some(Projection::None)).gradient,
                    );
                    let fd: Vec<f64> = (0..6).map(|l| (a[l] - b[l]) / (2.0 * FD_STEP)).collect();
                    let column: Vec<f64> = (0..6).map(|l| d.hessian[l][k]).collect();
                    let (err, at) = worst_relative(&column, &fd);
                    assert!(
                        err < FD_TOLERANCE,
                        "{model:?} sample {n}: Hessian column {k} off by {err:e} at {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn polar_stretch_derivative_matches_finite_differences_and_the_stress() {
        for model in MaterialModel::ALL {
            let m = evaluator(model);
            for (n, f) in random_deformations(model, 40, 13).iter().enumerate() {
                let mut warm = glam::DQuat::IDENTITY;
                let (s, jacobian) = polar_stretch(f, &mut warm);
                let base = vec9(f);
                for c in 0..9 {
                    let (mut a, mut b) = (base, base);
                    a[c] += FD_STEP;
                    b[c] -= FD_STEP;
                    let sa = polar_stretch(&unvec9(&a), &mut warm.clone()).0;
                    let sb = polar_stretch(&unvec9(&b), &mut warm.clone()).0;
                    let fd: Vec<f64> = (0..6).map(|k| (sa[k] - sb[k]) / (2.0 * FD_STEP)).collect();
                    let column: Vec<f64> = (0..6).map(|k| jacobian[k][c]).collect();
                    let (err, at) = worst_relative(&column, &fd);
                    assert!(
                        err < FD_TOLERANCE,
                        "{model:?} sample {n}: dS/dF column {c} off by {err:e} at {at}"
                    );
                }
                // The chain rule through the stretch gives the first Piola stress.
                let g = m.symmetric_derivatives(&s, Some(Projection::None)).gradient;
                let p: Vec<f64> = (0..9).map(|c| (0..6).map(|k| g[k] * jacobian[k][c]).sum()).collect();
                let (err, at) = worst_relative(&vec9(&m.stress(f)), &p);
                assert!(err < 1e-9, "{model:?} sample {n}: J^T dpsi/ds differs from P by {err:e} at {at}");
            }
        }
    }

    #[test]
    fn stretch_curvature_is_the_stress_works_second_derivative() {
        use crate::material::stretch::{signed_polar, stretch_curvature, stretch_derivative, sym_matrix};
        use crate::math::{symmetric_eigen3, symmetric_eigen3_from};
        for model in MaterialModel::ALL {
            let m = evaluator(model);
            for (n, f) in random_deformations(model, 40, 15).iter().enumerate() {
                let (s, r) = signed_polar(f, &mut { glam::DQuat::IDENTITY });
                // The material's own stress at S commutes with S: the pairs are then exact.
                let stress = m.symmetric_derivatives(&s, None).gradient;
                // The gradient of sigma : S(F) at fixed sigma, (dS/dF)^T sigma, differenced.
                let work_gradient = |v: &[f64; 9]| -> [f64; 9] {
                    let (s, r) = signed_polar(&unvec9(v), &mut { glam::DQuat::IDENTITY });
                    let jacobian = stretch_derivative(&s, &r);
                    std::array::from_fn(|c| (0..6).map(|k| stress[k] * jacobian[k][c]).sum())
                };
                let base = vec9(f);
                let mut fd = [[0.0; 9]; 9];
                for c in 0..9 {
                    let (mut a, mut b) = (base, base);
                    a[c] += FD_STEP;
                    b[c] -= FD_STEP;
                    let (ga, gb) = (work_gradient(&a), work_gradient(&b));
                    for row in 0..9 {
                        fd[row][c] = (ga[row] - gb[row]) / (2.0 * FD_STEP);
                    }
                }
                let mut pairs_sum = [[0.0; 9]; 9];
                // A cold eigensolve, and one warm-started from a nearby basis, agree.
                let curvature = stretch_curvature(&symmetric_eigen3(&sym_matrix(&s)), &r, &stress);
                let near = curvature.v
                    * DMat3::from_quat(glam::DQuat::from_scaled_axis(DVec3::new(0.02, -0.01, 0.03)));
                let [warm] = symmetric_eigen3_from(&[sym_matrix(&s)], &[near]);
                let warmed = stretch_curvature(&warm, &r, &stress);
                for (p, pair) in curvature.pairs.iter().enumerate() {
                    let exact = pair.form(Projection::None);
                    let projected = pair.form(Projection::Psd);
                    // The projection keeps the non-negative eigenvalue: PSD, and it only adds
                    // a PSD part (the negative eigenvalue's) to the exact form.
                    let psd = |k: [[f64; 2]; 2]| {
                        let scale = 1e-12 * (1.0 + k[0][0].abs() + k[1][1].abs());
                        k[0][0] + k[1][1] >= -scale
                            && k[0][0] * k[1][1] - k[0][1] * k[1][0] >= -scale * scale.max(1.0)
                    };
                    let added = [0, 1].map(|i| [0, 1].map(|j| projected[i][j] - exact[i][j]));
                    assert!(
                        psd(projected) && psd(added),
                        "{model:?} sample {n}: projection {projected:?} of {exact:?}"
                    );
                    let (twist, flip) = curvature.directions(p);
                    let other = warmed.pairs[p].form(Projection::None);
                    let (err, _) = worst_relative(other.as_flattened(), exact.as_flattened());
                    assert!(err < 1e-10, "{model:?} sample {n}: warm pair {p} {other:?}, cold {exact:?}");
                    let (warm_twist, warm_flip) = warmed.directions(p);
                    // The same directions, up to the sign an eigenvector's sign gives both.
                    let largest = |m: DMat3| m.to_cols_array().iter().fold(0.0, |a: f64, x| a.max(x.abs()));
                    let apart =
                        |sign: f64| largest(warm_twist - twist * sign) + largest(warm_flip - flip * sign);
                    assert!(
                        apart(1.0).min(apart(-1.0)) < 1e-8,
                        "{model:?} sample {n}: warm pair {p}'s directions"
                    );
                    // Applied to a vector, as the mixed solver's blocks take them.
                    let b = glam::DVec3::new(0.3, -1.2, 0.7);
                    let (twist_b, flip_b) = curvature.directions_times(p, curvature.v.transpose() * b);
                    assert!((twist_b - twist * b).length() + (flip_b - flip * b).length() < 1e-12);
                    let directions = [vec9(&twist), vec9(&flip)];
                    for (a, da) in directions.iter().enumerate() {
                        for (b, db) in directions.iter().enumerate() {
                            for row in 0..9 {
                                for c in 0..9 {
                                    pairs_sum[row][c] += exact[a][b] * da[row] * db[c];
                                }
                            }
                        }
                    }
                }
                let (err, at) = worst_relative(pairs_sum.as_flattened(), fd.as_flattened());
                assert!(err < FD_TOLERANCE, "{model:?} sample {n}: curvature entry {at} off by {err:e}");
            }
        }
    }

    #[test]
    fn projected_hessian_is_psd_and_exact_when_already_psd() {
        for model in MaterialModel::ALL {
            let m = evaluator(model);
            let mut projected_any = false;
            for s in stretches(model, 14) {
                let exact = m.symmetric_derivatives(&s, Some(Projection::None)).hessian;
                let projected = m.symmetric_derivatives(&s, Some(Projection::Psd)).hessian;
                let rows = |k: &[[f64; 6]; 6]| k.iter().map(|r| r.to_vec()).collect::<Vec<_>>();
                assert!(smallest_eigenvalue(&rows(&projected)) > -1e-9, "{model:?}: projection not PSD");
                if smallest_eigenvalue(&rows(&exact)) > 1e-8 {
                    assert_eq!(exact, projected, "{model:?}: projection changed a PD Hessian");
                } else {
                    projected_any = true;
                    // The magnitudes keep the trace of |H|, which is at least the trace of H.
                    let trace = |k: &[[f64; 6]; 6]| (0..6).map(|i| k[i][i]).sum::<f64>();
                    assert!(trace(&projected) >= trace(&exact) - 1e-9);
                }
            }
            // Corotated and ARAP are quadratic and convex in S; StVK is not under compression.
            match model {
                MaterialModel::Corotated | MaterialModel::Arap => assert!(!projected_any, "{model:?}"),
                MaterialModel::StVK => {
                    assert!(projected_any, "{model:?}: no sample exercised the projection")
                }
                _ => {}
            }
        }
    }

    #[test]
    fn coordinates_round_trip() {
        let s = [1.0, 2.0, 3.0, 0.4, 0.5, 0.6];
        assert_eq!(sym_coordinates(&sym_matrix(&s)), s);
    }
}

/// The closed-form tet Hessian blocks equal the tangent contracted with the shape gradients,
/// `H_ab[i][k] = sum_jl beta_a[j] K[(i,j),(k,l)] beta_b[l]`, where a model has them; the
/// others (and projected Hessians) have none.
#[test]
fn tet_hessian_is_the_contracted_tangent() {
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    for model in MaterialModel::ALL {
        let m = evaluator(model);
        for f in random_deformations(model, 30, 78) {
            let mut beta: [DVec3; 4] = std::array::from_fn(|_| {
                DVec3::new(
                    rng.random_range(-1.0..1.0),
                    rng.random_range(-1.0..1.0),
                    rng.random_range(-1.0..1.0),
                )
            });
            beta[3] = -(beta[0] + beta[1] + beta[2]);
            assert!(
                m.tet_hessian(&f, &beta, Projection::Psd).is_none(),
                "{model:?}: a projected closed form"
            );
            let Some(blocks) = m.tet_hessian(&f, &beta, Projection::None) else {
                assert_ne!(model, MaterialModel::StableNeoHookean, "stable neo-Hookean has a closed form");
                continue;
            };
            let k = m.stress_derivative(&f, Projection::None);
            let scale = k.iter().flatten().fold(0.0_f64, |s, v| s.max(v.abs())) * beta[0].length_squared();
            for a in 0..3 {
                for b in 0..3 {
                    for i in 0..3 {
                        for kk in 0..3 {
                            let mut expected = 0.0;
                            for j in 0..3 {
                                for l in 0..3 {
                                    expected += beta[a][j] * k[flat(i, j)][flat(kk, l)] * beta[b][l];
                                }
                            }
                            let got = blocks[a][b].col(kk)[i];
                            assert!(
                                (got - expected).abs() <= 1e-12 * scale,
                                "{model:?} block ({a}, {b})[{i}][{kk}]: {got} against {expected}"
                            );
                        }
                    }
                }
            }
        }
    }
}
