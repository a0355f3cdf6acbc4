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
//   `corner_gradients`) and blocks a J^T H J (into `element_blocks`), and what the local update
//   and the merit need (`mixed_linearization`);
// - `local_update`: the step of d and the multipliers from the position step `direction`, and
//   the tets' part of the merit's slope (energy partials);
// - `merit`: the tets' part of the merit at the iterate and d + alpha ds (energy partials);
// - `advance`: d += alpha ds.
//
// mixed_linearization holds, per tet e, field f at f T + e: the Jacobian's columns of corners
// 0-2 (54 = 6 x 9, row-major; corner 3's are minus their sum), the PSD-projected stretch
// Hessian's upper triangle (21), psi'(s) (6), psi'(s(F)) (6), s(F) - I (6), the step (6) and
// the multipliers (6).

#import shared/rotation
#import shared/material
#import shared/tets
#import shared/dispatch

@group(2) @binding(2) var<storage, read_write> mixed_rotations: array<vec4<f32>>;
@group(2) @binding(3) var<storage, read_write> stretch: array<f32>;

@group(3) @binding(0) var<storage, read_write> corner_gradients: array<vec4<f32>>;
@group(3) @binding(1) var<storage, read_write> energy_partials: array<f32>;
@group(3) @binding(2) var<storage, read_write> displacement_corners: array<vec4<f32>>;
@group(3) @binding(3) var<storage, read_write> element_blocks: array<vec4<f32>>;
@group(3) @binding(4) var<storage, read_write> mixed_linearization: array<f32>;
// The position step of the condensed system (PCG's solution).
@group(3) @binding(5) var<storage, read> direction: array<f32>;

const JACOBIAN: u32 = 0u;
const HESSIAN: u32 = 54u;
const GRADIENT: u32 = 75u;
const GRADIENT_OF_X: u32 = 81u;
const STRETCH_OF_X: u32 = 87u;
const STEP: u32 = 93u;
const MULTIPLIER: u32 = 99u;

alias Sym6 = array<f32, 6>;
alias Mat6 = array<array<f32, 6>, 6>;

// Row and column of coordinate k.
fn index_of(k: u32) -> vec2<u32> {
    switch k {
        case 0u: { return vec2<u32>(0u, 0u); }
        case 1u: { return vec2<u32>(1u, 1u); }
        case 2u: { return vec2<u32>(2u, 2u); }
        case 3u: { return vec2<u32>(1u, 2u); }
        case 4u: { return vec2<u32>(0u, 2u); }
        default: { return vec2<u32>(0u, 1u); }
    }
}

fn sym_matrix(d: Sym6) -> mat3x3<f32> {
    return mat3x3<f32>(vec3<f32>(d[0], d[5], d[4]), vec3<f32>(d[5], d[1], d[3]), vec3<f32>(d[4], d[3], d[2]));
}

// The coordinates of m's symmetric part.
fn sym_coordinates(m: mat3x3<f32>) -> Sym6 {
    return Sym6(m[0][0], m[1][1], m[2][2], 0.5 * (m[1][2] + m[2][1]), 0.5 * (m[0][2] + m[2][0]), 0.5 * (m[0][1] + m[1][0]));
}

// <P, E_k> for every coordinate: the gradient whose matrix form is P.
fn gradient_coordinates(p: mat3x3<f32>) -> Sym6 {
    return Sym6(p[0][0], p[1][1], p[2][2], p[1][2] + p[2][1], p[0][2] + p[2][0], p[0][1] + p[1][0]);
}

fn unit(k: u32) -> mat3x3<f32> {
    var d = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    d[k] = 1.0;
    return sym_matrix(d);
}

fn dot6(a: Sym6, b: Sym6) -> f32 {
    var s = 0.0;
    for (var k = 0u; k < 6u; k++) {
        s += a[k] * b[k];
    }
    return s;
}

fn times6(h: Mat6, v: Sym6) -> Sym6 {
    var out = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (var k = 0u; k < 6u; k++) {
        out[k] = dot6(h[k], v);
    }
    return out;
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

// d^2 psi [A, B] at S = I + D.
fn stretch_second(dm: mat3x3<f32>, m: Lame, a: mat3x3<f32>, b: mat3x3<f32>) -> f32 {
    let s = identity3() + dm;
    if (m.model == STVK) {
        let e = dm + dm * dm * 0.5;
        let da = (s * a + a * s) * 0.5;
        let db = (s * b + b * s) * 0.5;
        let ab = (a * b + b * a) * 0.5;
        return 2.0 * m.mu * (frobenius(da, db) + frobenius(e, ab))
            + m.lambda * (trace3(da) * trace3(db) + trace3(e) * trace3(ab));
    }
    if (m.model == ARAP || m.model == COROTATED) {
        let l = select(m.lambda, 0.0, m.model == ARAP);
        return 2.0 * m.mu * frobenius(a, b) + l * trace3(a) * trace3(b);
    }
    let c = cofactor(s);
    let ca = frobenius(c, a);
    let cb = frobenius(c, b);
    let second_j = frobenius(cofactor_differential(s, b), a);
    let jm1 = j_minus_one(dm);
    if (m.model == FIXED_COROTATED) {
        return 2.0 * m.mu * frobenius(a, b) + m.lambda * (ca * cb + jm1 * second_j);
    }
    if (m.model == STABLE_NEO_HOOKEAN) {
        let l = m.lambda + m.mu;
        return m.mu * frobenius(a, b) + l * ca * cb + (l * jm1 - m.mu) * second_j;
    }
    // Neo-Hookean.
    let j = 1.0 + jm1;
    let stress_j = m.lambda * ln_1p(jm1) - m.mu;
    return m.mu * frobenius(a, b) + stress_j * (second_j / j - ca * cb / (j * j)) + m.lambda * ca * cb / (j * j);
}

// Replaces the negative eigenvalues of the symmetric h by their magnitudes (cyclic Jacobi),
// unless h is positive definite (a Cholesky factorization succeeds).
fn positive_semidefinite(h: Mat6) -> Mat6 {
    var l: Mat6;
    var definite = true;
    for (var j = 0u; j < 6u; j++) {
        var diagonal = h[j][j];
        for (var k = 0u; k < j; k++) {
            diagonal -= l[j][k] * l[j][k];
        }
        if (!(diagonal > 0.0)) {
            definite = false;
            break;
        }
        l[j][j] = sqrt(diagonal);
        for (var i = j + 1u; i < 6u; i++) {
            var s = h[i][j];
            for (var k = 0u; k < j; k++) {
                s -= l[i][k] * l[j][k];
            }
            l[i][j] = s / l[j][j];
        }
    }
    if (definite) {
        return h;
    }
    var a = h;
    var v: Mat6;
    for (var i = 0u; i < 6u; i++) {
        v[i][i] = 1.0;
    }
    var scale = 0.0;
    for (var i = 0u; i < 6u; i++) {
        for (var j = 0u; j < 6u; j++) {
            scale += a[i][j] * a[i][j];
        }
    }
    for (var sweep = 0u; sweep < 20u; sweep++) {
        var off = 0.0;
        for (var p = 0u; p < 6u; p++) {
            for (var q = p + 1u; q < 6u; q++) {
                off += a[p][q] * a[p][q];
            }
        }
        if (off <= 1e-14 * scale) {
            break;
        }
        for (var p = 0u; p < 6u; p++) {
            for (var q = p + 1u; q < 6u; q++) {
                if (a[p][q] == 0.0) {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                var t = sign(theta) / (abs(theta) + sqrt(theta * theta + 1.0));
                if (theta == 0.0) {
                    t = 1.0;
                }
                let c = 1.0 / sqrt(t * t + 1.0);
                let s = t * c;
                for (var k = 0u; k < 6u; k++) {
                    let akp = a[k][p];
                    let akq = a[k][q];
                    a[k][p] = c * akp - s * akq;
                    a[k][q] = s * akp + c * akq;
                }
                for (var k = 0u; k < 6u; k++) {
                    let apk = a[p][k];
                    let aqk = a[q][k];
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
                for (var k = 0u; k < 6u; k++) {
                    let vp = v[k][p];
                    let vq = v[k][q];
                    v[k][p] = c * vp - s * vq;
                    v[k][q] = s * vp + c * vq;
                }
            }
        }
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
    return out;
}

// The stretch Hessian at S = I + D, PSD-projected.
fn stretch_hessian(dm: mat3x3<f32>, m: Lame) -> Mat6 {
    var h: Mat6;
    for (var k = 0u; k < 6u; k++) {
        for (var l = k; l < 6u; l++) {
            let value = stretch_second(dm, m, unit(k), unit(l));
            h[k][l] = value;
            h[l][k] = value;
        }
    }
    return positive_semidefinite(h);
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

fn load_hessian(e: u32) -> Mat6 {
    var h: Mat6;
    var u = 0u;
    for (var k = 0u; k < 6u; k++) {
        for (var l = k; l < 6u; l++) {
            let value = mixed_linearization[slot(HESSIAN + u, e)];
            h[k][l] = value;
            h[l][k] = value;
            u++;
        }
    }
    return h;
}

// S - I of F = I + h with the closest rotation q: R^T F - I = h + (R - I)^T (I + h).
fn stretch_of(h: mat3x3<f32>, q: vec4<f32>) -> mat3x3<f32> {
    let rmi = rotation_minus_identity(q);
    let d = h + transpose(rmi) + transpose(rmi) * h;
    return sym_matrix(sym_coordinates(d));
}

// The Jacobian of s(F) at the node, columns of corners 0-2 (theta included): row k, column
// 3a + i is theta sum_j dS_k/dF_ij beta_a[j].
fn stretch_jacobian(t: Tet, q: vec4<f32>, dm: mat3x3<f32>, theta: f32) -> array<array<f32, 9>, 6> {
    let r = identity3() + rotation_minus_identity(q);
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
    let beta = array<vec3<f32>, 3>(t.b0, t.b1, t.b2);
    var out: array<array<f32, 9>, 6>;
    for (var i = 0u; i < 3u; i++) {
        let row = vec3<f32>(r[0][i], r[1][i], r[2][i]);
        var ds_df: array<Sym6, 3>;
        for (var j = 0u; j < 3u; j++) {
            var axial = vec3<f32>(0.0);
            axial[(j + 1u) % 3u] = -row[(j + 2u) % 3u];
            axial[(j + 2u) % 3u] = row[(j + 1u) % 3u];
            let w = inverse * axial;
            let x = mat3x3<f32>(cross(w, s[0]), cross(w, s[1]), cross(w, s[2]));
            for (var k = 0u; k < 6u; k++) {
                let ab = index_of(k);
                let a = ab.x;
                let b = ab.y;
                let m = 0.5 * (select(0.0, row[a], b == j) + select(0.0, row[b], a == j));
                ds_df[j][k] = m - 0.5 * (x[b][a] + x[a][b]);
            }
        }
        for (var k = 0u; k < 6u; k++) {
            let d = vec3<f32>(ds_df[0][k], ds_df[1][k], ds_df[2][k]) * theta;
            for (var a = 0u; a < 3u; a++) {
                out[k][3u * a + i] = dot(d, beta[a]);
            }
        }
    }
    return out;
}

fn load_jacobian(e: u32) -> array<array<f32, 9>, 6> {
    var out: array<array<f32, 9>, 6>;
    for (var k = 0u; k < 6u; k++) {
        for (var c = 0u; c < 9u; c++) {
            out[k][c] = mixed_linearization[slot(JACOBIAN + 9u * k + c, e)];
        }
    }
    return out;
}

// Rows r0..r0+2 of the Hessian, columns c0..c0+2, as a matrix.
fn hessian_block(h: Mat6, r0: u32, c0: u32) -> mat3x3<f32> {
    return mat3x3<f32>(
        vec3<f32>(h[r0][c0], h[r0 + 1u][c0], h[r0 + 2u][c0]),
        vec3<f32>(h[r0][c0 + 1u], h[r0 + 1u][c0 + 1u], h[r0 + 2u][c0 + 1u]),
        vec3<f32>(h[r0][c0 + 2u], h[r0 + 1u][c0 + 2u], h[r0 + 2u][c0 + 2u]),
    );
}

// Rows r0..r0+2 of the Jacobian's columns of corner a (0-2): column i is direction i.
fn corner_rows(jacobian: array<array<f32, 9>, 6>, r0: u32, a: u32) -> mat3x3<f32> {
    let c = 3u * a;
    return mat3x3<f32>(
        vec3<f32>(jacobian[r0][c], jacobian[r0 + 1u][c], jacobian[r0 + 2u][c]),
        vec3<f32>(jacobian[r0][c + 1u], jacobian[r0 + 1u][c + 1u], jacobian[r0 + 2u][c + 1u]),
        vec3<f32>(jacobian[r0][c + 2u], jacobian[r0 + 1u][c + 2u], jacobian[r0 + 2u][c + 2u]),
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
    let q = closest_rotation(h, vec4<f32>(0.0, 0.0, 0.0, 1.0));
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
    let q = closest_rotation(h, mixed_rotations[e]);
    mixed_rotations[e] = q;
    let dm_x = stretch_of(h, q);
    let jacobian = stretch_jacobian(t, q, dm_x, cw.y);
    let d = load_stretch(e);
    let dm = sym_matrix(d);
    let hessian = stretch_hessian(dm, m);
    let gradient = gradient_coordinates(stretch_stress(dm, m));
    let gradient_of_x = gradient_coordinates(stretch_stress(dm_x, m));
    let d_x = sym_coordinates(dm_x);
    var gap = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (var k = 0u; k < 6u; k++) {
        gap[k] = d_x[k] - d[k];
    }
    let h_gap = times6(hessian, gap);
    var residual = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (var k = 0u; k < 6u; k++) {
        residual[k] = gradient[k] + h_gap[k];
    }
    let weight = cw.x * t.volume;
    let d0 = corner_rows(jacobian, 0u, 0u);
    let d1 = corner_rows(jacobian, 0u, 1u);
    let d2 = corner_rows(jacobian, 0u, 2u);
    let d3 = (d0 + d1 + d2) * -1.0;
    let o0 = corner_rows(jacobian, 3u, 0u);
    let o1 = corner_rows(jacobian, 3u, 1u);
    let o2 = corner_rows(jacobian, 3u, 2u);
    let o3 = (o0 + o1 + o2) * -1.0;
    // Corner a's gradients, J_a^T g, in the same pieces.
    let gx_d = vec3<f32>(gradient_of_x[0], gradient_of_x[1], gradient_of_x[2]);
    let gx_o = vec3<f32>(gradient_of_x[3], gradient_of_x[4], gradient_of_x[5]);
    let r_d = vec3<f32>(residual[0], residual[1], residual[2]);
    let r_o = vec3<f32>(residual[3], residual[4], residual[5]);
    store_corner_pair(e, 0u, weight * (gx_d * d0 + gx_o * o0), weight * (r_d * d0 + r_o * o0));
    store_corner_pair(e, 1u, weight * (gx_d * d1 + gx_o * o1), weight * (r_d * d1 + r_o * o1));
    store_corner_pair(e, 2u, weight * (gx_d * d2 + gx_o * o2), weight * (r_d * d2 + r_o * o2));
    store_corner_pair(e, 3u, weight * (gx_d * d3 + gx_o * o3), weight * (r_d * d3 + r_o * o3));
    // a J^T H J, the ten upper blocks (a, b), a <= b, in 3x3 pieces with constant indices
    // (the stretch coordinates split into the diagonal three and the off-diagonal three), so
    // that nothing here is an array indexed at run time: those live in local memory on
    // NVIDIA. With loops over 6x12 arrays this pass took 11.7 ms at 100K tets on an H100;
    // 0.9 ms in this form.
    let hdd = hessian_block(hessian, 0u, 0u);
    let hdo = hessian_block(hessian, 0u, 3u);
    let hod = hessian_block(hessian, 3u, 0u);
    let hoo = hessian_block(hessian, 3u, 3u);
    // (H J_b) in its diagonal and off-diagonal rows, weighted.
    let xd0 = (hdd * d0 + hdo * o0) * weight;
    let xo0 = (hod * d0 + hoo * o0) * weight;
    let xd1 = (hdd * d1 + hdo * o1) * weight;
    let xo1 = (hod * d1 + hoo * o1) * weight;
    let xd2 = (hdd * d2 + hdo * o2) * weight;
    let xo2 = (hod * d2 + hoo * o2) * weight;
    let xd3 = (hdd * d3 + hdo * o3) * weight;
    let xo3 = (hod * d3 + hoo * o3) * weight;
    store_block(e, 0u, transpose(d0) * xd0 + transpose(o0) * xo0);
    store_block(e, 1u, transpose(d0) * xd1 + transpose(o0) * xo1);
    store_block(e, 2u, transpose(d0) * xd2 + transpose(o0) * xo2);
    store_block(e, 3u, transpose(d0) * xd3 + transpose(o0) * xo3);
    store_block(e, 4u, transpose(d1) * xd1 + transpose(o1) * xo1);
    store_block(e, 5u, transpose(d1) * xd2 + transpose(o1) * xo2);
    store_block(e, 6u, transpose(d1) * xd3 + transpose(o1) * xo3);
    store_block(e, 7u, transpose(d2) * xd2 + transpose(o2) * xo2);
    store_block(e, 8u, transpose(d2) * xd3 + transpose(o2) * xo3);
    store_block(e, 9u, transpose(d3) * xd3 + transpose(o3) * xo3);
    for (var k = 0u; k < 6u; k++) {
        for (var c = 0u; c < 9u; c++) {
            mixed_linearization[slot(JACOBIAN + 9u * k + c, e)] = jacobian[k][c];
        }
    }
    var v = 0u;
    for (var k = 0u; k < 6u; k++) {
        for (var l = k; l < 6u; l++) {
            mixed_linearization[slot(HESSIAN + v, e)] = hessian[k][l];
            v++;
        }
    }
    store6(GRADIENT, e, gradient);
    store6(GRADIENT_OF_X, e, gradient_of_x);
    store6(STRETCH_OF_X, e, d_x);
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
        let jacobian = load_jacobian(e);
        let hessian = load_hessian(e);
        // J dx, in the pieces of `linearize` (corner 3's columns are minus the others').
        let c3 = corner_direction(t.v.w);
        let c0 = corner_direction(t.v.x) - c3;
        let c1 = corner_direction(t.v.y) - c3;
        let c2 = corner_direction(t.v.z) - c3;
        let jd = corner_rows(jacobian, 0u, 0u) * c0 + corner_rows(jacobian, 0u, 1u) * c1 + corner_rows(jacobian, 0u, 2u) * c2;
        let jo = corner_rows(jacobian, 3u, 0u) * c0 + corner_rows(jacobian, 3u, 1u) * c1 + corner_rows(jacobian, 3u, 2u) * c2;
        let j_dx = Sym6(jd.x, jd.y, jd.z, jo.x, jo.y, jo.z);
        let d = load_stretch(e);
        let d_x = load6(STRETCH_OF_X, e);
        let gradient = load6(GRADIENT, e);
        let gradient_of_x = load6(GRADIENT_OF_X, e);
        var step = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for (var k = 0u; k < 6u; k++) {
            step[k] = d_x[k] - d[k] + j_dx[k];
        }
        let h_step = times6(hessian, step);
        var multiplier = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for (var k = 0u; k < 6u; k++) {
            multiplier[k] = -(gradient[k] + h_step[k]);
            slope += (-gradient_of_x[k] - multiplier[k]) * j_dx[k] + (gradient[k] + multiplier[k]) * step[k];
        }
        store6(STEP, e, step);
        store6(MULTIPLIER, e, multiplier);
        slope *= node(0u).x * t.volume;
    }
    reduce(lid, workgroup_slot(group, groups), slope);
}

@compute @workgroup_size(WORKGROUP)
fn merit(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = run_tet(group, groups, lid);
    var value = 0.0;
    if (e != 0xffffffffu) {
        let t = load_tet(e);
        let m = lame(tet_material[e]);
        let cw = node(0u);
        let h = displacement_gradient(t, cw.y);
        let d_x = sym_coordinates(stretch_of(h, closest_rotation(h, mixed_rotations[e])));
        let d = load_stretch(e);
        let step = load6(STEP, e);
        let multiplier = load6(MULTIPLIER, e);
        var s = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        var gap = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for (var k = 0u; k < 6u; k++) {
            s[k] = d[k] + params.alpha * step[k];
            gap[k] = d_x[k] - s[k];
        }
        value = cw.x * t.volume * (stretch_energy_density(sym_matrix(s), m) - dot6(multiplier, gap));
    }
    reduce(lid, workgroup_slot(group, groups), value);
}

@compute @workgroup_size(WORKGROUP)
fn advance(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let e = run_tet(group, groups, lid);
    if (e == 0xffffffffu) {
        return;
    }
    let d = load_stretch(e);
    let step = load6(STEP, e);
    var out = Sym6(0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (var k = 0u; k < 6u; k++) {
        out[k] = d[k] + params.alpha * step[k];
    }
    store_stretch(e, out);
}
