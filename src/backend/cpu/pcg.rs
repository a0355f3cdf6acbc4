//! Stage `pcg`: Jacobi-preconditioned conjugate gradients on the assembled Hessian, starting
//! from zero. Following the optimization integrator, a direction of non-positive curvature
//! ends the solve: the last iterate is returned (or the right-hand side, if it happens on the
//! first iteration), which is still a descent direction for the Newton step.

use rayon::prelude::*;

use super::{hessian_product, vector};
use crate::backend::topology::Topology;

/// Work vectors, kept between solves.
#[derive(Default)]
pub(crate) struct Scratch {
    r: Vec<[f64; 3]>,
    z: Vec<[f64; 3]>,
    p: Vec<[f64; 3]>,
    ap: Vec<[f64; 3]>,
    inverse_diagonal: Vec<[f64; 3]>,
}

/// How a solve ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Outcome {
    pub iterations: usize,
    pub negative_curvature: bool,
    /// `|b - A x| / |b|` when the solve stopped.
    pub relative_residual: f64,
}

/// Solves `A x = b` to `|r| <= tolerance |b|`, at most `max_iterations` iterations.
pub(crate) fn solve(
    topology: &Topology,
    blocks: &[[f64; 9]],
    b: &[[f64; 3]],
    x: &mut [[f64; 3]],
    scratch: &mut Scratch,
    tolerance: f64,
    max_iterations: usize,
) -> Outcome {
    let n = b.len();
    for v in [
        &mut scratch.r,
        &mut scratch.z,
        &mut scratch.p,
        &mut scratch.ap,
        &mut scratch.inverse_diagonal,
    ] {
        v.resize(n, [0.0; 3]);
    }
    let Scratch {
        r,
        z,
        p,
        ap,
        inverse_diagonal,
    } = scratch;
    inverse_diagonal
        .par_iter_mut()
        .enumerate()
        .for_each(|(v, d)| {
            let block = &blocks[topology.diagonal[v] as usize];
            // An indefinite diagonal cannot precondition CG; its magnitude still scales well.
            *d = [block[0], block[4], block[8]].map(|a| if a != 0.0 { 1.0 / a.abs() } else { 1.0 });
        });
    let precondition = |r: &[[f64; 3]], z: &mut [[f64; 3]], inv: &[[f64; 3]]| {
        z.par_iter_mut()
            .with_min_len(1024)
            .zip(r.par_iter().zip(inv.par_iter()))
            .for_each(|(z, (r, d))| {
                *z = [r[0] * d[0], r[1] * d[1], r[2] * d[2]];
            });
    };
    x.fill([0.0; 3]);
    r.copy_from_slice(b);
    let b_norm = vector::dot(b, b).sqrt();
    if b_norm == 0.0 {
        return Outcome {
            iterations: 0,
            negative_curvature: false,
            relative_residual: 0.0,
        };
    }
    precondition(r, z, inverse_diagonal);
    p.copy_from_slice(z);
    let mut rz = vector::dot(r, z);
    let mut residual = 1.0;
    for iteration in 0..max_iterations {
        hessian_product::apply(topology, blocks, p, ap);
        let curvature = vector::dot(p, ap);
        if !(curvature > 0.0) {
            if iteration == 0 {
                x.copy_from_slice(b);
            }
            return Outcome {
                iterations: iteration + 1,
                negative_curvature: true,
                relative_residual: residual,
            };
        }
        let alpha = rz / curvature;
        vector::axpy(alpha, p, x);
        vector::axpy(-alpha, ap, r);
        residual = vector::dot(r, r).sqrt() / b_norm;
        if residual <= tolerance {
            return Outcome {
                iterations: iteration + 1,
                negative_curvature: false,
                relative_residual: residual,
            };
        }
        precondition(r, z, inverse_diagonal);
        let rz_next = vector::dot(r, z);
        let beta = rz_next / rz;
        rz = rz_next;
        p.par_iter_mut()
            .with_min_len(1024)
            .zip(z.par_iter())
            .for_each(|(p, z)| {
                for c in 0..3 {
                    p[c] = z[c] + beta * p[c];
                }
            });
    }
    Outcome {
        iterations: max_iterations,
        negative_curvature: false,
        relative_residual: residual,
    }
}
