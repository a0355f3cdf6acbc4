// Stage `mixed`: the per-tet part of the mixed-FEM SQP iteration, the twin of
// src/backend/cpu/mixed.rs (and of the materials in the stretch, src/material/stretch.rs).
// Each tet carries its symmetric stretch s as d = s - I (six coordinates S00, S11, S22, S12,
// S02, S01, each off-diagonal entry once), so that nothing cancels in f32 near rest; its
// closest rotation is kept as a quaternion, the warm start of the next evaluation. One node
// (c, theta) per objective.
//
// Entry points, one invocation per tet of a run:
// - `begin`: d = s(F) - I at x_start, the rotation from the identity;
// - `linearize`: at the iterate, the displacement formulation's corner gradients a J^T psi'(s(F))
//   (into `displacement_corners`), the condensed system's a J^T (g + H (s(F) - s)) (into
//   `corner_gradients`) and blocks a (J^T H J + C) (into `element_blocks`; C the constraint's
//   curvature under the last multipliers, exact where EXACT_CURVATURE, else its non-negative
//   part), and what the local update and the merit need (`mixed_linearization`);
// - `local_update`: the step of d and the multipliers from the position step `direction`, and
//   the tets' part of the merit's slope (energy partials);
// - `merit`: the tets' part of the merit at the iterate and d + alpha ds (energy partials),
//   or over a batch of positions at the line search's step lengths (`step_length`);
// - `advance`: d += alpha ds, and the step's multipliers kept as the accepted ones;
//   `advance_chosen` the same with the step a budgeted solve chose on the device (none where
//   it chose none).
//
// mixed_linearization holds, per tet e, field f at f T + e: the Jacobian's columns of corners
// 0-2 (54 = 6 x 9, row-major; corner 3's are minus their sum), the PSD-projected stretch
// Hessian's upper triangle (21), psi'(s) (6), psi'(s(F)) (6), s(F) - I (6), the step (6), the
// multipliers (6) and those of the last step taken (6; the curvature's stress).

#import shared/rotation
#import shared/material
#import shared/tets
#import shared/dispatch
#import shared/search

@group(2) @binding(2) var<storage, read_write> mixed_rotations: array<vec4<f32>>;
@group(2) @binding(3) var<storage, read_write> stretch: array<f32>;

@group(3) @binding(0) var<storage, read_write> corner_gradients: array<vec4<f32>>;
@group(3) @binding(1) var<storage, read_write> energy_partials: array<f32>;
@group(3) @binding(2) var<storage, read_write> displacement_corners: array<vec4<f32>>;
@group(3) @binding(3) var<storage, read_write> element_blocks: array<vec4<f32>>;
@group(3) @binding(4) var<storage, read_write> mixed_linearization: array<f32>;
// The position step of the condensed system (PCG's solution). Only read here, but declared
// read_write as everywhere: it is a range of the arena that the stages bind for writing
// (`GpuBuffers::pack`), and one dispatch may not bind one buffer both ways.
@group(3) @binding(5) var<storage, read_write> direction: array<f32>;
// The budgeted solve's record (`line_search`), for the step it chose. Read only, declared
// read_write for the same reason as `direction`.
@group(3) @binding(6) var<storage, read_write> search: Search;

// The condensed blocks' stretch curvature: exact (Projection::None) or its non-negative part.
override EXACT_CURVATURE: bool = false;

const JACOBIAN: u32 = 0u;
const HESSIAN: u32 = 54u;
const GRADIENT: u32 = 75u;
const GRADIENT_OF_X: u32 = 81u;
const STRETCH_OF_X: u32 = 87u;
const STEP: u32 = 93u;
const MULTIPLIER: u32 = 99u;
const ACCEPTED: u32 = 105u;

alias Sym6 = array<f32, 6>;
alias Mat6 = array<array<f32, 6>, 6>;

fn sym_matrix(d: Sym6) -> mat3x3<f32> {
    return mat3x3<f32>(vec3<f32>(d[0], d[5], d[4]), vec3<f32>(d[5], d[1], d[3]), vec3<f32>(d[4], d[3], d[2]));
}

// The coordinates of m's symmetric part.
fn sym_coordinates(m: mat3x3<f32>) -> Sym6 {
    return Sym6(m[0][0], m[1][1], m[2][2], 0.5 * (m[1][2] + m[2][1]), 0.5 * (m[0][2] + m[2][0]), 0.5 * (m[0][1] + m[1][0]));
}

// <P, E_k> for every coordinate: the gradient whose matrix form is P.
fn gradient_coordinates(p: mat3x3<f32>) -> Sym6 {
    return joined(diagonal_part(p), shear_part(p));
}

fn dot6(a: Sym6, b: Sym6) -> f32 {
    var s = 0.0;
    for (var k = 0u; k < 6u; k++) {
        s += a[k] * b[k];
    }
    return s;
}

// The diagonal coordinates of v (0-2) and its shear ones (3-5).
fn first_half(v: Sym6) -> vec3<f32> {
    return vec3<f32>(v[0], v[1], v[2]);
}

fn second_half(v: Sym6) -> vec3<f32> {
    return vec3<f32>(v[3], v[4], v[5]);
}

fn joined(d: vec3<f32>, o: vec3<f32>) -> Sym6 {
    return Sym6(d.x, d.y, d.z, o.x, o.y, o.z);
}

fn is_rotation_model(model: u32) -> bool {
    return model == COROTATED || model == FIXED_COROTATED || model == ARAP;
}

// psi at S = I + D; +inf where neo-Hookean is undefined.
fn stretch_energy_density(dm: mat3x3<f32>, m: Lame) -> f32 {
    if (!is_rotation_model(m.model)) {
        return energy_density(dm, m);
    }
    let tr = trace3(dm);
    let squared = squared_norm(dm);
    if (m.model == ARAP) {
        return m.mu * squared;
    }
    if (m.model == COROTATED) {
        return m.mu * squared + 0.5 * m.lambda * tr * tr;
    }
    let jm1 = j_minus_one(dm);
    return m.mu * squared + 0.5 * m.lambda * jm1 * jm1;
}

// dpsi/dS as a matrix, at S = I + D.
fn stretch_stress(dm: mat3x3<f32>, m: Lame) -> mat3x3<f32> {
    if (!is_rotation_model(m.model)) {
        return first_piola(dm, m);
    }
    let tr = trace3(dm);
    if (m.model == FIXED_COROTATED) {
        return dm * (2.0 * m.mu) + cofactor(identity3() + dm) * (m.lambda * j_minus_one(dm));
    }
    let l = select(m.lambda, 0.0, m.model == ARAP);
    return dm * (2.0 * m.mu) + identity3() * (l * tr);
}

// The stretch Hessian in 3x3 blocks: dd over the diagonal coordinates (0-2), ss over the
// shear ones (3-5), ds with diagonal rows and shear columns. Built and used with constant
// indices only: a 6x6 array indexed in loops lives in local memory on NVIDIA.
struct Hessian6 {
    dd: mat3x3<f32>,
    ds: mat3x3<f32>,
    ss: mat3x3<f32>,
}

// <G, E_k> of the diagonal coordinates and of the shear ones.
fn diagonal_part(g: mat3x3<f32>) -> vec3<f32> {
    return vec3<f32>(g[0][0], g[1][1], g[2][2]);
}

fn shear_part(g: mat3x3<f32>) -> vec3<f32> {
    return vec3<f32>(g[1][2] + g[2][1], g[0][2] + g[2][0], g[0][1] + g[1][0]);
}

// H x of the 6-vector (xd, xs), returned as its two halves (columns 0 and 1).
fn hessian_times(h: Hessian6, xd: vec3<f32>, xs: vec3<f32>) -> mat2x3<f32> {
    return mat2x3<f32>(h.dd * xd + h.ds * xs, transpose(h.ds) * xd + h.ss * xs);
}

// The invariants' form of the Hessian (the CPU twin's `combine`): gram <E_k, E_l> + t tr E_k
// tr E_l + c_outer c_k c_l + second_j d^2 det, with c the cofactor's coordinates.
fn invariant_hessian(dm: mat3x3<f32>, gram: f32, t: f32, c_outer: f32, second_j: f32) -> Hessian6 {
    let s = identity3() + dm;
    let cof = cofactor(s);
    let cd = diagonal_part(cof);
    let cs = shear_part(cof);
    let sd = diagonal_part(s);
    let ss = vec3<f32>(s[1][2], s[0][2], s[0][1]);
    // d^2 det in coordinates: det = s0 s1 s2 + 2 s3 s4 s5 - s0 s3^2 - s1 s4^2 - s2 s5^2.
    let det_dd = mat3x3<f32>(vec3<f32>(0.0, sd.z, sd.y), vec3<f32>(sd.z, 0.0, sd.x), vec3<f32>(sd.y, sd.x, 0.0));
    let det_ss = mat3x3<f32>(
        vec3<f32>(-2.0 * sd.x, 2.0 * ss.z, 2.0 * ss.y),
        vec3<f32>(2.0 * ss.z, -2.0 * sd.y, 2.0 * ss.x),
        vec3<f32>(2.0 * ss.y, 2.0 * ss.x, -2.0 * sd.z),
    );
    let ones = mat3x3<f32>(vec3<f32>(1.0), vec3<f32>(1.0), vec3<f32>(1.0));
    return Hessian6(
        identity3() * gram + ones * t + outer3(cd, cd) * c_outer + det_dd * second_j,
        outer3(cd, cs) * c_outer + diagonal3(ss * (-2.0 * second_j)),
        identity3() * (2.0 * gram) + outer3(cs, cs) * c_outer + det_ss * second_j,
    );
}

// StVK's column d^2 psi [., B] at S (B a coordinate's unit matrix), as a matrix G with
// <E_k, G> the Hessian's entry (k, B): 2 mu (S dB + B E) + lambda (tr dB S + tr E B), with
// dB = (S B + B S) / 2 and E the Green strain.
fn stvk_column(s: mat3x3<f32>, e: mat3x3<f32>, m: Lame, b: mat3x3<f32>) -> mat3x3<f32> {
    let db = (s * b + b * s) * 0.5;
    return (s * db + b * e) * (2.0 * m.mu) + s * (m.lambda * trace3(db)) + b * (m.lambda * trace3(e));
}

fn stvk_hessian(dm: mat3x3<f32>, m: Lame) -> Hessian6 {
    let s = identity3() + dm;
    let e = dm + dm * dm * 0.5;
    let x = vec3<f32>(1.0, 0.0, 0.0);
    let y = vec3<f32>(0.0, 1.0, 0.0);
    let z = vec3<f32>(0.0, 0.0, 1.0);
    let o = vec3<f32>(0.0);
    let g0 = stvk_column(s, e, m, mat3x3<f32>(x, o, o));
    let g1 = stvk_column(s, e, m, mat3x3<f32>(o, y, o));
    let g2 = stvk_column(s, e, m, mat3x3<f32>(o, o, z));
    let g3 = stvk_column(s, e, m, mat3x3<f32>(o, z, y));
    let g4 = stvk_column(s, e, m, mat3x3<f32>(z, o, x));
    let g5 = stvk_column(s, e, m, mat3x3<f32>(y, x, o));
    let dd = mat3x3<f32>(diagonal_part(g0), diagonal_part(g1), diagonal_part(g2));
    let ss = mat3x3<f32>(shear_part(g3), shear_part(g4), shear_part(g5));
    // Symmetric in exact arithmetic; each mirrored pair averaged, as one value.
    return Hessian6((dd + transpose(dd)) * 0.5, mat3x3<f32>(diagonal_part(g3), diagonal_part(g4), diagonal_part(g5)), (ss + transpose(ss)) * 0.5);
}

// The exact stretch Hessian at S = I + D.
fn exact_stretch_hessian(dm: mat3x3<f32>, m: Lame) -> Hessian6 {
    if (m.model == STVK) {
        return stvk_hessian(dm, m);
    }
    if (m.model == ARAP || m.model == COROTATED) {
        return invariant_hessian(dm, 2.0 * m.mu, select(m.lambda, 0.0, m.model == ARAP), 0.0, 0.0);
    }
    let jm1 = j_minus_one(dm);
    if (m.model == FIXED_COROTATED) {
        return invariant_hessian(dm, 2.0 * m.mu, 0.0, m.lambda, m.lambda * jm1);
    }
    if (m.model == STABLE_NEO_HOOKEAN) {
        let l = m.lambda + m.mu;
        return invariant_hessian(dm, m.mu, 0.0, l, l * jm1 - m.mu);
    }
    // Neo-Hookean.
    let j = 1.0 + jm1;
    let stress_j = m.lambda * ln_1p(jm1) - m.mu;
    return invariant_hessian(dm, m.mu, 0.0, (m.lambda - stress_j) / (j * j), stress_j / j);
}

fn diagonal3(d: vec3<f32>) -> mat3x3<f32> {
    return mat3x3<f32>(vec3<f32>(d.x, 0.0, 0.0), vec3<f32>(0.0, d.y, 0.0), vec3<f32>(0.0, 0.0, d.z));
}

// Sylvester's test of a symmetric 3x3 matrix.
fn definite3(m: mat3x3<f32>) -> bool {
    return m[0][0] > 0.0 && m[0][0] * m[1][1] - m[0][1] * m[1][0] > 0.0 && determinant(m) > 0.0;
}

// m times 2^shift, exactly (short of underflow).
fn scaled3(m: mat3x3<f32>, shift: vec3<i32>) -> mat3x3<f32> {
    return mat3x3<f32>(ldexp(m[0], shift), ldexp(m[1], shift), ldexp(m[2], shift));
}

fn largest_entry(m: mat3x3<f32>) -> f32 {
    let columns = max(max(abs(m[0]), abs(m[1])), abs(m[2]));
    return max(columns.x, max(columns.y, columns.z));
}

// H is positive definite when dd is and so is its Schur complement ss - ds^T dd^-1 ds.
// Tested on H scaled by the power of two just above its largest entry, which leaves the
// answer as it is: a 1e14 Pa material's determinants, its scale cubed, overflowed f32, the
// Schur complement was NaN, and every such tet took the Jacobi projection it did not need.
fn definite(h: Hessian6) -> bool {
    let largest = max(largest_entry(h.dd), max(largest_entry(h.ds), largest_entry(h.ss)));
    let shift = vec3<i32>(-frexp(largest).exp);
    let dd = scaled3(h.dd, shift);
    if (!definite3(dd)) {
        return false;
    }
    // dd^-1 = adj(dd) / det(dd), and adj(dd) = cofactor(dd) for a symmetric dd.
    let ds = scaled3(h.ds, shift);
    let schur = scaled3(h.ss, shift) - transpose(ds) * cofactor(dd) * ds * (1.0 / determinant(dd));
    return definite3(schur);
}

fn to_mat6(h: Hessian6) -> Mat6 {
    return Mat6(
        array<f32, 6>(h.dd[0][0], h.dd[1][0], h.dd[2][0], h.ds[0][0], h.ds[1][0], h.ds[2][0]),
        array<f32, 6>(h.dd[0][1], h.dd[1][1], h.dd[2][1], h.ds[0][1], h.ds[1][1], h.ds[2][1]),
        array<f32, 6>(h.dd[0][2], h.dd[1][2], h.dd[2][2], h.ds[0][2], h.ds[1][2], h.ds[2][2]),
        array<f32, 6>(h.ds[0][0], h.ds[0][1], h.ds[0][2], h.ss[0][0], h.ss[1][0], h.ss[2][0]),
        array<f32, 6>(h.ds[1][0], h.ds[1][1], h.ds[1][2], h.ss[0][1], h.ss[1][1], h.ss[2][1]),
        array<f32, 6>(h.ds[2][0], h.ds[2][1], h.ds[2][2], h.ss[0][2], h.ss[1][2], h.ss[2][2]),
    );
}

fn from_mat6(a: Mat6) -> Hessian6 {
    return Hessian6(
        mat3x3<f32>(vec3<f32>(a[0][0], a[1][0], a[2][0]), vec3<f32>(a[0][1], a[1][1], a[2][1]), vec3<f32>(a[0][2], a[1][2], a[2][2])),
        mat3x3<f32>(vec3<f32>(a[0][3], a[1][3], a[2][3]), vec3<f32>(a[0][4], a[1][4], a[2][4]), vec3<f32>(a[0][5], a[1][5], a[2][5])),
        mat3x3<f32>(vec3<f32>(a[3][3], a[4][3], a[5][3]), vec3<f32>(a[3][4], a[4][4], a[5][4]), vec3<f32>(a[3][5], a[4][5], a[5][5])),
    );
}

// One Jacobi rotation of the pair (p, q) on a and its eigenvectors v. Called with constant
// pairs, so that once inlined every index is constant and a and v stay in registers.
fn jacobi_rotation(a: ptr<function, Mat6>, v: ptr<function, Mat6>, p: u32, q: u32) {
    let apq = (*a)[p][q];
    if (apq == 0.0) {
        return;
    }
    let theta = ((*a)[q][q] - (*a)[p][p]) / (2.0 * apq);
    var t = sign(theta) / (abs(theta) + sqrt(theta * theta + 1.0));
    if (theta == 0.0) {
        t = 1.0;
    }
    let c = 1.0 / sqrt(t * t + 1.0);
    let s = t * c;
    for (var k = 0u; k < 6u; k++) {
        let akp = (*a)[k][p];
        let akq = (*a)[k][q];
        (*a)[k][p] = c * akp - s * akq;
        (*a)[k][q] = s * akp + c * akq;
    }
    for (var k = 0u; k < 6u; k++) {
        let apk = (*a)[p][k];
        let aqk = (*a)[q][k];
        (*a)[p][k] = c * apk - s * aqk;
        (*a)[q][k] = s * apk + c * aqk;
    }
    for (var k = 0u; k < 6u; k++) {
        let vp = (*v)[k][p];
        let vq = (*v)[k][q];
        (*v)[k][p] = c * vp - s * vq;
        (*v)[k][q] = s * vp + c * vq;
    }
}

// Replaces the negative eigenvalues of the symmetric h by their magnitudes (cyclic Jacobi, as
// the CPU twin's `make_positive_semidefinite`), unless h is positive definite. The sweeps stop
// at f32's resolution: off-diagonal mass below 1e-12 of the whole (1e-14 was under f32's
// rounding of the rotations, and a tet that met it ran all 20 sweeps).
fn positive_semidefinite(h: Hessian6) -> Hessian6 {
    if (definite(h)) {
        return h;
    }
    var a = to_mat6(h);
    var v = Mat6(
        array<f32, 6>(1.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        array<f32, 6>(0.0, 1.0, 0.0, 0.0, 0.0, 0.0),
        array<f32, 6>(0.0, 0.0, 1.0, 0.0, 0.0, 0.0),
        array<f32, 6>(0.0, 0.0, 0.0, 1.0, 0.0, 0.0),
        array<f32, 6>(0.0, 0.0, 0.0, 0.0, 1.0, 0.0),
        array<f32, 6>(0.0, 0.0, 0.0, 0.0, 0.0, 1.0),
    );
    let scale = squared_norm(h.dd) + 2.0 * squared_norm(h.ds) + squared_norm(h.ss);
    for (var sweep = 0u; sweep < 20u; sweep++) {
        var off = 0.0;
        for (var p = 0u; p < 6u; p++) {
            for (var q = p + 1u; q < 6u; q++) {
                off += a[p][q] * a[p][q];
            }
        }
        if (off <= 1e-12 * scale) {
            break;
        }
        jacobi_rotation(&a, &v, 0u, 1u);
        jacobi_rotation(&a, &v, 0u, 2u);
        jacobi_rotation(&a, &v, 0u, 3u);
        jacobi_rotation(&a, &v, 0u, 4u);
        jacobi_rotation(&a, &v, 0u, 5u);
        jacobi_rotation(&a, &v, 1u, 2u);
        jacobi_rotation(&a, &v, 1u, 3u);
        jacobi_rotation(&a, &v, 1u, 4u);
        jacobi_rotation(&a, &v, 1u, 5u);
        jacobi_rotation(&a, &v, 2u, 3u);
        jacobi_rotation(&a, &v, 2u, 4u);
        jacobi_rotation(&a, &v, 2u, 5u);
        jacobi_rotation(&a, &v, 3u, 4u);
        jacobi_rotation(&a, &v, 3u, 5u);
        jacobi_rotation(&a, &v, 4u, 5u);
    }
    var out: Mat6;
    for (var i = 0u; i < 6u; i++) {
        for (var j = 0u; j < 6u; j++) {
            var value = 0.0;
            for (var k = 0u; k < 6u; k++) {
                value += v[i][k] * abs(a[k][k]) * v[j][k];
            }
            out[i][j] = value;
        }
    }
    return from_mat6(out);
}

// The stretch Hessian at S = I + D, PSD-projected.
fn stretch_hessian(dm: mat3x3<f32>, m: Lame) -> Hessian6 {
    return positive_semidefinite(exact_stretch_hessian(dm, m));
}

// The field f of tet e in mixed_linearization.
fn slot(f: u32, e: u32) -> u32 {
    return f * params.tet_count + e;
}

fn load6(base: u32, e: u32) -> Sym6 {
    var out = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (var k = 0u; k < 6u; k++) {
        out[k] = mixed_linearization[slot(base + k, e)];
    }
    return out;
}

fn store6(base: u32, e: u32, v: Sym6) {
    for (var k = 0u; k < 6u; k++) {
        mixed_linearization[slot(base + k, e)] = v[k];
    }
}

fn load_stretch(e: u32) -> Sym6 {
    var out = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (var k = 0u; k < 6u; k++) {
        out[k] = stretch[k * params.tet_count + e];
    }
    return out;
}

fn store_stretch(e: u32, d: Sym6) {
    for (var k = 0u; k < 6u; k++) {
        stretch[k * params.tet_count + e] = d[k];
    }
}

// S - I of F = I + h with the closest rotation q: R^T F - I = h + (R - I)^T (I + h).
fn stretch_of(h: mat3x3<f32>, q: vec4<f32>) -> mat3x3<f32> {
    let rmi = rotation_minus_identity(q);
    let d = h + transpose(rmi) + transpose(rmi) * h;
    return sym_matrix(sym_coordinates(d));
}

// dS/dF_ij as a matrix (symmetric part taken by the coordinates), for row i of R and the unit
// axis j: sym(row axis^T) - sym(X), X's columns w x S_c with w = (tr S I - S)^-1 (e_j x row).
fn stretch_rate(inverse: mat3x3<f32>, s: mat3x3<f32>, row: vec3<f32>, axis: vec3<f32>) -> mat3x3<f32> {
    let w = inverse * cross(axis, row);
    let x = mat3x3<f32>(cross(w, s[0]), cross(w, s[1]), cross(w, s[2]));
    return mat3x3<f32>(row * axis.x, row * axis.y, row * axis.z) - x;
}

// dS/dF_ij for the three j of one row i of F: column j of `d` holds the diagonal coordinates,
// of `s` the shear ones.
struct Rates {
    d: mat3x3<f32>,
    s: mat3x3<f32>,
}

fn stretch_rates(inverse: mat3x3<f32>, s: mat3x3<f32>, row: vec3<f32>) -> Rates {
    let p0 = stretch_rate(inverse, s, row, vec3<f32>(1.0, 0.0, 0.0));
    let p1 = stretch_rate(inverse, s, row, vec3<f32>(0.0, 1.0, 0.0));
    let p2 = stretch_rate(inverse, s, row, vec3<f32>(0.0, 0.0, 1.0));
    return Rates(
        mat3x3<f32>(diagonal_part(p0), diagonal_part(p1), diagonal_part(p2)),
        mat3x3<f32>(shear_part(p0), shear_part(p1), shear_part(p2)) * 0.5,
    );
}

// The Jacobian of s(F) at the node for corners 0-2, theta included, in 3x3 pieces: dA holds the
// rows of the diagonal coordinates, sA those of the shear ones, column i direction i of corner
// A. Corner 3's are minus the sum of the others.
struct StretchJacobian {
    d0: mat3x3<f32>,
    d1: mat3x3<f32>,
    d2: mat3x3<f32>,
    s0: mat3x3<f32>,
    s1: mat3x3<f32>,
    s2: mat3x3<f32>,
}

fn stretch_jacobian(t: Tet, q: vec4<f32>, dm: mat3x3<f32>, theta: f32) -> StretchJacobian {
    let rows = transpose(identity3() + rotation_minus_identity(q));
    let s = identity3() + dm;
    // (tr S I - S)^-1 from its cofactors; where two stretches cancel, shifted.
    let pair_sums = identity3() * (2.0 + trace3(dm)) - dm;
    let scale = max(abs(3.0 + trace3(dm)), 1.0);
    var det = determinant(pair_sums);
    var g = pair_sums;
    if (abs(det) <= 1e-6 * scale * scale * scale) {
        g = pair_sums + identity3() * (1e-3 * scale);
        det = determinant(g);
    }
    let inverse = transpose(cofactor(g)) * (1.0 / det);
    let r0 = stretch_rates(inverse, s, rows[0]);
    let r1 = stretch_rates(inverse, s, rows[1]);
    let r2 = stretch_rates(inverse, s, rows[2]);
    // Column i of corner a's piece: sum_j dS/dF_ij beta_a[j].
    let b0 = t.b0 * theta;
    let b1 = t.b1 * theta;
    let b2 = t.b2 * theta;
    return StretchJacobian(
        mat3x3<f32>(r0.d * b0, r1.d * b0, r2.d * b0),
        mat3x3<f32>(r0.d * b1, r1.d * b1, r2.d * b1),
        mat3x3<f32>(r0.d * b2, r1.d * b2, r2.d * b2),
        mat3x3<f32>(r0.s * b0, r1.s * b0, r2.s * b0),
        mat3x3<f32>(r0.s * b1, r1.s * b1, r2.s * b1),
        mat3x3<f32>(r0.s * b2, r1.s * b2, r2.s * b2),
    );
}

// The Jacobian's field of row k, corner a, direction i (row-major over the 6 x 9 columns of
// corners 0-2).
fn jacobian_field(k: u32, a: u32, i: u32) -> u32 {
    return JACOBIAN + 9u * k + 3u * a + i;
}

// Rows r0..r0+2 of corner a's columns (a piece of `StretchJacobian`) into mixed_linearization.
fn store_jacobian_rows(e: u32, r0: u32, a: u32, m: mat3x3<f32>) {
    mixed_linearization[slot(jacobian_field(r0, a, 0u), e)] = m[0].x;
    mixed_linearization[slot(jacobian_field(r0, a, 1u), e)] = m[1].x;
    mixed_linearization[slot(jacobian_field(r0, a, 2u), e)] = m[2].x;
    mixed_linearization[slot(jacobian_field(r0 + 1u, a, 0u), e)] = m[0].y;
    mixed_linearization[slot(jacobian_field(r0 + 1u, a, 1u), e)] = m[1].y;
    mixed_linearization[slot(jacobian_field(r0 + 1u, a, 2u), e)] = m[2].y;
    mixed_linearization[slot(jacobian_field(r0 + 2u, a, 0u), e)] = m[0].z;
    mixed_linearization[slot(jacobian_field(r0 + 2u, a, 1u), e)] = m[1].z;
    mixed_linearization[slot(jacobian_field(r0 + 2u, a, 2u), e)] = m[2].z;
}

fn load_jacobian_rows(e: u32, r0: u32, a: u32) -> mat3x3<f32> {
    return mat3x3<f32>(
        vec3<f32>(
            mixed_linearization[slot(jacobian_field(r0, a, 0u), e)],
            mixed_linearization[slot(jacobian_field(r0 + 1u, a, 0u), e)],
            mixed_linearization[slot(jacobian_field(r0 + 2u, a, 0u), e)],
        ),
        vec3<f32>(
            mixed_linearization[slot(jacobian_field(r0, a, 1u), e)],
            mixed_linearization[slot(jacobian_field(r0 + 1u, a, 1u), e)],
            mixed_linearization[slot(jacobian_field(r0 + 2u, a, 1u), e)],
        ),
        vec3<f32>(
            mixed_linearization[slot(jacobian_field(r0, a, 2u), e)],
            mixed_linearization[slot(jacobian_field(r0 + 1u, a, 2u), e)],
            mixed_linearization[slot(jacobian_field(r0 + 2u, a, 2u), e)],
        ),
    );
}

// The Hessian's upper triangle, row by row (21 fields from HESSIAN).
fn store_hessian(e: u32, h: Hessian6) {
    mixed_linearization[slot(HESSIAN + 0u, e)] = h.dd[0][0];
    mixed_linearization[slot(HESSIAN + 1u, e)] = h.dd[1][0];
    mixed_linearization[slot(HESSIAN + 2u, e)] = h.dd[2][0];
    mixed_linearization[slot(HESSIAN + 3u, e)] = h.ds[0][0];
    mixed_linearization[slot(HESSIAN + 4u, e)] = h.ds[1][0];
    mixed_linearization[slot(HESSIAN + 5u, e)] = h.ds[2][0];
    mixed_linearization[slot(HESSIAN + 6u, e)] = h.dd[1][1];
    mixed_linearization[slot(HESSIAN + 7u, e)] = h.dd[2][1];
    mixed_linearization[slot(HESSIAN + 8u, e)] = h.ds[0][1];
    mixed_linearization[slot(HESSIAN + 9u, e)] = h.ds[1][1];
    mixed_linearization[slot(HESSIAN + 10u, e)] = h.ds[2][1];
    mixed_linearization[slot(HESSIAN + 11u, e)] = h.dd[2][2];
    mixed_linearization[slot(HESSIAN + 12u, e)] = h.ds[0][2];
    mixed_linearization[slot(HESSIAN + 13u, e)] = h.ds[1][2];
    mixed_linearization[slot(HESSIAN + 14u, e)] = h.ds[2][2];
    mixed_linearization[slot(HESSIAN + 15u, e)] = h.ss[0][0];
    mixed_linearization[slot(HESSIAN + 16u, e)] = h.ss[1][0];
    mixed_linearization[slot(HESSIAN + 17u, e)] = h.ss[2][0];
    mixed_linearization[slot(HESSIAN + 18u, e)] = h.ss[1][1];
    mixed_linearization[slot(HESSIAN + 19u, e)] = h.ss[2][1];
    mixed_linearization[slot(HESSIAN + 20u, e)] = h.ss[2][2];
}

fn load_hessian(e: u32) -> Hessian6 {
    let h0 = mixed_linearization[slot(HESSIAN + 0u, e)];
    let h1 = mixed_linearization[slot(HESSIAN + 1u, e)];
    let h2 = mixed_linearization[slot(HESSIAN + 2u, e)];
    let h3 = mixed_linearization[slot(HESSIAN + 3u, e)];
    let h4 = mixed_linearization[slot(HESSIAN + 4u, e)];
    let h5 = mixed_linearization[slot(HESSIAN + 5u, e)];
    let h6 = mixed_linearization[slot(HESSIAN + 6u, e)];
    let h7 = mixed_linearization[slot(HESSIAN + 7u, e)];
    let h8 = mixed_linearization[slot(HESSIAN + 8u, e)];
    let h9 = mixed_linearization[slot(HESSIAN + 9u, e)];
    let h10 = mixed_linearization[slot(HESSIAN + 10u, e)];
    let h11 = mixed_linearization[slot(HESSIAN + 11u, e)];
    let h12 = mixed_linearization[slot(HESSIAN + 12u, e)];
    let h13 = mixed_linearization[slot(HESSIAN + 13u, e)];
    let h14 = mixed_linearization[slot(HESSIAN + 14u, e)];
    let h15 = mixed_linearization[slot(HESSIAN + 15u, e)];
    let h16 = mixed_linearization[slot(HESSIAN + 16u, e)];
    let h17 = mixed_linearization[slot(HESSIAN + 17u, e)];
    let h18 = mixed_linearization[slot(HESSIAN + 18u, e)];
    let h19 = mixed_linearization[slot(HESSIAN + 19u, e)];
    let h20 = mixed_linearization[slot(HESSIAN + 20u, e)];
    return Hessian6(
        mat3x3<f32>(vec3<f32>(h0, h1, h2), vec3<f32>(h1, h6, h7), vec3<f32>(h2, h7, h11)),
        mat3x3<f32>(vec3<f32>(h3, h8, h12), vec3<f32>(h4, h9, h13), vec3<f32>(h5, h10, h14)),
        mat3x3<f32>(vec3<f32>(h15, h16, h17), vec3<f32>(h16, h18, h19), vec3<f32>(h17, h19, h20)),
    );
}

// Corner a's gradient of the plain (displacement) objective and of the condensed one.
fn store_corner_pair(e: u32, a: u32, plain: vec3<f32>, condensed: vec3<f32>) {
    displacement_corners[tet_corner(e, a, params.tet_count)] = vec4<f32>(plain, 0.0);
    store_corner(e, a, condensed);
}

// Upper block u of tet e by column (column j of b is WGSL's b[j]).
fn store_block(e: u32, u: u32, b: mat3x3<f32>) {
    for (var j = 0u; j < 3u; j++) {
        element_blocks[tet_block_column(e, u, j, params.tet_count)] = vec4<f32>(b[j], 0.0);
    }
}

fn run_tet(group: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    let index = workgroup_slot(group, groups) * WORKGROUP + lid;
    if (index < params.count) {
        return params.first + index;
    }
    return 0xffffffffu;
}

@compute @workgroup_size(WORKGROUP)
fn begin(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = run_tet(group, groups, lid);
    if (e == 0xffffffffu) {
        return;
    }
    let t = load_tet(e);
    // At x_start: theta = 0 takes the start positions.
    let h = displacement_gradient(t, 0.0);
    let q = closest_rotation(h, vec4<f32>(0.0, 0.0, 0.0, 1.0), false);
    mixed_rotations[e] = q;
    store_stretch(e, sym_coordinates(stretch_of(h, q)));
}

@compute @workgroup_size(WORKGROUP)
fn linearize(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = run_tet(group, groups, lid);
    if (e == 0xffffffffu) {
        return;
    }
    let t = load_tet(e);
    let m = lame(tet_material[e]);
    let cw = node(0u);
    let h = displacement_gradient(t, cw.y);
    let q = closest_rotation(h, mixed_rotations[e], false);
    mixed_rotations[e] = q;
    let dm_x = stretch_of(h, q);
    let jacobian = stretch_jacobian(t, q, dm_x, cw.y);
    let d = load_stretch(e);
    let dm = sym_matrix(d);
    let hessian = stretch_hessian(dm, m);
    let gradient = gradient_coordinates(stretch_stress(dm, m));
    let gradient_of_x = gradient_coordinates(stretch_stress(dm_x, m));
    let d_x = sym_coordinates(dm_x);
    // The residual g + H (s(F) - s), in its diagonal and shear halves.
    let h_gap = hessian_times(hessian, first_half(d_x) - first_half(d), second_half(d_x) - second_half(d));
    let r_d = first_half(gradient) + h_gap[0];
    let r_o = second_half(gradient) + h_gap[1];
    let weight = cw.x * t.volume;
    let d0 = jacobian.d0;
    let d1 = jacobian.d1;
    let d2 = jacobian.d2;
    let d3 = (d0 + d1 + d2) * -1.0;
    let o0 = jacobian.s0;
    let o1 = jacobian.s1;
    let o2 = jacobian.s2;
    let o3 = (o0 + o1 + o2) * -1.0;
    // Corner a's gradients, J_a^T g, in the same pieces.
    let gx_d = first_half(gradient_of_x);
    let gx_o = second_half(gradient_of_x);
    store_corner_pair(e, 0u, weight * (gx_d * d0 + gx_o * o0), weight * (r_d * d0 + r_o * o0));
    store_corner_pair(e, 1u, weight * (gx_d * d1 + gx_o * o1), weight * (r_d * d1 + r_o * o1));
    store_corner_pair(e, 2u, weight * (gx_d * d2 + gx_o * o2), weight * (r_d * d2 + r_o * o2));
    store_corner_pair(e, 3u, weight * (gx_d * d3 + gx_o * o3), weight * (r_d * d3 + r_o * o3));
    // a J^T H J, the ten upper blocks (a, b), a <= b, in 3x3 pieces with constant indices
    // (the stretch coordinates split into the diagonal three and the shear three), so that
    // nothing here is an array indexed at run time: those live in local memory on NVIDIA.
    // With loops over 6x12 arrays this pass took 11.7 ms at 100K tets on an H100; 0.9 ms with
    // the blocks in this form and the Jacobian and Hessian still built in loops.
    let hdd = hessian.dd;
    let hdo = hessian.ds;
    let hod = transpose(hessian.ds);
    let hoo = hessian.ss;
    // (H J_b) in its diagonal and off-diagonal rows, weighted.
    let xd0 = (hdd * d0 + hdo * o0) * weight;
    let xo0 = (hod * d0 + hoo * o0) * weight;
    let xd1 = (hdd * d1 + hdo * o1) * weight;
    let xo1 = (hod * d1 + hoo * o1) * weight;
    let xd2 = (hdd * d2 + hdo * o2) * weight;
    let xo2 = (hod * d2 + hoo * o2) * weight;
    let xd3 = (hdd * d3 + hdo * o3) * weight;
    let xo3 = (hod * d3 + hoo * o3) * weight;
    // The stretch's curvature under the stress of the last step's multipliers
    // (matrix form: shear coordinates halved), by pairs of principal stretches of
    // s(F) = I + dm_x (its eigenvectors v, u = R v).
    let multiplier = load6(ACCEPTED, e);
    let stress = sym_matrix(joined(first_half(multiplier), second_half(multiplier) * 0.5)) * -1.0;
    let eigen = symmetric_eigen3(dm_x);
    let dv = eigen.values;
    let v = eigen.vectors;
    let u = (identity3() + rotation_minus_identity(q)) * v;
    let tau = vec3<f32>(dot(v[0], stress * v[0]), dot(v[1], stress * v[1]), dot(v[2], stress * v[2]));
    let scale = max(max(abs(1.0 + dv.x), abs(1.0 + dv.y)), max(abs(1.0 + dv.z), 1.0));
    let p0 = curvature_pair(dv.x, dv.y, tau.x, tau.y, u[0], u[1], v[0], v[1], scale);
    let p1 = curvature_pair(dv.x, dv.z, tau.x, tau.z, u[0], u[2], v[0], v[2], scale);
    let p2 = curvature_pair(dv.y, dv.z, tau.y, tau.z, u[1], u[2], v[1], v[2], scale);
    let curvature_weight = cw.y * cw.y * weight;
    let k00 = vec3<f32>(p0.form[0][0], p1.form[0][0], p2.form[0][0]) * curvature_weight;
    let k01 = vec3<f32>(p0.form[0][1], p1.form[0][1], p2.form[0][1]) * curvature_weight;
    let k11 = vec3<f32>(p0.form[1][1], p1.form[1][1], p2.form[1][1]) * curvature_weight;
    let c0 = corner_directions(p0, p1, p2, t.b0);
    let c1 = corner_directions(p0, p1, p2, t.b1);
    let c2 = corner_directions(p0, p1, p2, t.b2);
    let c3 = CornerDirections((c0.t + c1.t + c2.t) * -1.0, (c0.y + c1.y + c2.y) * -1.0);
    store_block(e, 0u, transpose(d0) * xd0 + transpose(o0) * xo0 + curvature_block(c0, c0, k00, k01, k11));
    store_block(e, 1u, transpose(d0) * xd1 + transpose(o0) * xo1 + curvature_block(c0, c1, k00, k01, k11));
    store_block(e, 2u, transpose(d0) * xd2 + transpose(o0) * xo2 + curvature_block(c0, c2, k00, k01, k11));
    store_block(e, 3u, transpose(d0) * xd3 + transpose(o0) * xo3 + curvature_block(c0, c3, k00, k01, k11));
    store_block(e, 4u, transpose(d1) * xd1 + transpose(o1) * xo1 + curvature_block(c1, c1, k00, k01, k11));
    store_block(e, 5u, transpose(d1) * xd2 + transpose(o1) * xo2 + curvature_block(c1, c2, k00, k01, k11));
    store_block(e, 6u, transpose(d1) * xd3 + transpose(o1) * xo3 + curvature_block(c1, c3, k00, k01, k11));
    store_block(e, 7u, transpose(d2) * xd2 + transpose(o2) * xo2 + curvature_block(c2, c2, k00, k01, k11));
    store_block(e, 8u, transpose(d2) * xd3 + transpose(o2) * xo3 + curvature_block(c2, c3, k00, k01, k11));
    store_block(e, 9u, transpose(d3) * xd3 + transpose(o3) * xo3 + curvature_block(c3, c3, k00, k01, k11));
    store_jacobian_rows(e, 0u, 0u, d0);
    store_jacobian_rows(e, 0u, 1u, d1);
    store_jacobian_rows(e, 0u, 2u, d2);
    store_jacobian_rows(e, 3u, 0u, o0);
    store_jacobian_rows(e, 3u, 1u, o1);
    store_jacobian_rows(e, 3u, 2u, o2);
    store_hessian(e, hessian);
    store6(GRADIENT, e, gradient);
    store6(GRADIENT_OF_X, e, gradient_of_x);
    store6(STRETCH_OF_X, e, d_x);
}

// One pair of principal stretches' share of the stretch curvature (the twin of
// stretch_curvature in src/material/stretch.rs): its twist and flip directions in F and the
// form in them, [[twist, coupling], [coupling, 0]] or its non-negative part, by columns.
struct CurvaturePair {
    twist_direction: mat3x3<f32>,
    flip_direction: mat3x3<f32>,
    form: mat2x2<f32>,
}

// The pair (i, k) of stretches s = 1 + d, stresses t along their axes, axes u in the deformed
// frame and v in the rest frame.
fn curvature_pair(di: f32, dk: f32, ti: f32, tk: f32, ui: vec3<f32>, uk: vec3<f32>, vi: vec3<f32>, vk: vec3<f32>, scale: f32) -> CurvaturePair {
    let half = 0.70710678;
    let ik = outer3(ui, vk);
    let ki = outer3(uk, vi);
    var pair = CurvaturePair((ik - ki) * half, (ik + ki) * half, mat2x2<f32>());
    let sum = 2.0 + di + dk;
    if (sum <= 1e-6 * scale) {
        return pair;
    }
    let twist = 2.0 * (ti * (1.0 + dk) + tk * (1.0 + di)) / (sum * sum);
    let coupling = (tk - ti) / sum;
    if (EXACT_CURVATURE) {
        pair.form = mat2x2<f32>(twist, coupling, coupling, 0.0);
        return pair;
    }
    let root = sqrt(twist * twist + 4.0 * coupling * coupling);
    var lambda = 0.5 * (twist + root);
    if (twist < 0.0) {
        lambda = 2.0 * coupling * coupling / (root - twist);
    }
    if (lambda > 0.0) {
        let e = vec2<f32>(lambda, coupling) / sqrt(lambda * lambda + coupling * coupling);
        pair.form = mat2x2<f32>(e * (lambda * e.x), e * (lambda * e.y));
    }
    return pair;
}

// Corner a's gradients of F : D for the three pairs' twist (T) and flip (Y) directions, as
// columns.
struct CornerDirections {
    t: mat3x3<f32>,
    y: mat3x3<f32>,
}

fn corner_directions(p0: CurvaturePair, p1: CurvaturePair, p2: CurvaturePair, b: vec3<f32>) -> CornerDirections {
    return CornerDirections(
        mat3x3<f32>(p0.twist_direction * b, p1.twist_direction * b, p2.twist_direction * b),
        mat3x3<f32>(p0.flip_direction * b, p1.flip_direction * b, p2.flip_direction * b),
    );
}

// sum over pairs and their forms k of k_mn (D_m beta_a) (D_n beta_b)^T, the pairs' forms
// given by entry across pairs (k00, k01, k11).
fn curvature_block(a: CornerDirections, b: CornerDirections, k00: vec3<f32>, k01: vec3<f32>, k11: vec3<f32>) -> mat3x3<f32> {
    let along_twist = mat3x3<f32>(a.t[0] * k00.x + a.y[0] * k01.x, a.t[1] * k00.y + a.y[1] * k01.y, a.t[2] * k00.z + a.y[2] * k01.z);
    let along_flip = mat3x3<f32>(a.t[0] * k01.x + a.y[0] * k11.x, a.t[1] * k01.y + a.y[1] * k11.y, a.t[2] * k01.z + a.y[2] * k11.z);
    return along_twist * transpose(b.t) + along_flip * transpose(b.y);
}

fn corner_direction(v: u32) -> vec3<f32> {
    return vec3<f32>(direction[3u * v], direction[3u * v + 1u], direction[3u * v + 2u]);
}

@compute @workgroup_size(WORKGROUP)
fn local_update(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = run_tet(group, groups, lid);
    var slope = 0.0;
    if (e != 0xffffffffu) {
        let t = load_tet(e);
        let hessian = load_hessian(e);
        // J dx, in the pieces of `linearize` (corner 3's columns are minus the others').
        let c3 = corner_direction(t.v.w);
        let c0 = corner_direction(t.v.x) - c3;
        let c1 = corner_direction(t.v.y) - c3;
        let c2 = corner_direction(t.v.z) - c3;
        let jd = load_jacobian_rows(e, 0u, 0u) * c0 + load_jacobian_rows(e, 0u, 1u) * c1 + load_jacobian_rows(e, 0u, 2u) * c2;
        let jo = load_jacobian_rows(e, 3u, 0u) * c0 + load_jacobian_rows(e, 3u, 1u) * c1 + load_jacobian_rows(e, 3u, 2u) * c2;
        let d = load_stretch(e);
        let d_x = load6(STRETCH_OF_X, e);
        let gradient = load6(GRADIENT, e);
        let gradient_of_x = load6(GRADIENT_OF_X, e);
        let step_d = first_half(d_x) - first_half(d) + jd;
        let step_o = second_half(d_x) - second_half(d) + jo;
        let h_step = hessian_times(hessian, step_d, step_o);
        let multiplier_d = -(first_half(gradient) + h_step[0]);
        let multiplier_o = -(second_half(gradient) + h_step[1]);
        slope = dot(-first_half(gradient_of_x) - multiplier_d, jd) + dot(-second_half(gradient_of_x) - multiplier_o, jo)
            + dot(first_half(gradient) + multiplier_d, step_d) + dot(second_half(gradient) + multiplier_o, step_o);
        let step = joined(step_d, step_o);
        let multiplier = joined(multiplier_d, multiplier_o);
        store6(STEP, e, step);
        store6(MULTIPLIER, e, multiplier);
        slope *= node(0u).x * t.volume;
    }
    reduce(lid, workgroup_slot(group, groups), slope);
}

@compute @workgroup_size(WORKGROUP)
fn merit(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // In a batch, member j holds the positions at the line search's j-th step length, and
    // its stretches take that step too.
    let slot = run_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    let alpha = params.alpha * step_length(member);
    var value = 0.0;
    if (index < params.count && in_batch()) {
        let e = params.first + index;
        let t = load_tet(e);
        let m = lame(tet_material[e]);
        let cw = node(0u);
        let h = displacement_gradient(t, cw.y);
        let d_x = sym_coordinates(stretch_of(h, closest_rotation(h, mixed_rotations[e], false)));
        let d = load_stretch(e);
        let step = load6(STEP, e);
        let multiplier = load6(MULTIPLIER, e);
        var s = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        var gap = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for (var k = 0u; k < 6u; k++) {
            s[k] = d[k] + alpha * step[k];
            gap[k] = d_x[k] - s[k];
        }
        value = cw.x * t.volume * (stretch_energy_density(sym_matrix(s), m) - dot6(multiplier, gap));
        // As the CPU twin: +inf where the positions' stretch leaves neo-Hookean's domain.
        let dm_x = sym_matrix(d_x);
        if (m.model == NEO_HOOKEAN && outside_neo_hookean(dm_x, j_minus_one(dm_x))) {
            value = bitcast<f32>(0x7f800000u);
        }
    }
    reduce(lid, slot, value);
}

// d += alpha ds, and the step's multipliers kept as the accepted ones.
fn advance_tet(e: u32, alpha: f32) {
    let d = load_stretch(e);
    let step = load6(STEP, e);
    var out = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (var k = 0u; k < 6u; k++) {
        out[k] = d[k] + alpha * step[k];
    }
    store_stretch(e, out);
    store6(ACCEPTED, e, load6(MULTIPLIER, e));
}

@compute @workgroup_size(WORKGROUP)
fn advance(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = run_tet(group, groups, lid);
    if (e != 0xffffffffu) {
        advance_tet(e, params.alpha);
    }
}

@compute @workgroup_size(WORKGROUP)
fn advance_chosen(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = run_tet(group, groups, lid);
    let alpha = search.alpha;
    if (e != 0xffffffffu && alpha != 0.0) {
        advance_tet(e, alpha);
    }
}
