// Polynomial hyperelastic models in f32: the twins of the closed forms in
// src/material/isotropic.rs, taking the displacement gradient H = F - I itself (the element
// stage builds it from displacements), so that nothing cancels near rest. F[j][i] is F_ij:
// WGSL matrices are indexed by column.

const STVK: u32 = 0u;
const NEO_HOOKEAN: u32 = 1u;
const STABLE_NEO_HOOKEAN: u32 = 2u;

struct Lame {
    model: u32,
    mu: f32,
    lambda: f32,
}

fn lame(packed: vec4<f32>) -> Lame {
    return Lame(u32(packed.x), packed.y, packed.z);
}

fn trace3(m: mat3x3<f32>) -> f32 {
    return m[0][0] + m[1][1] + m[2][2];
}

fn squared_norm(m: mat3x3<f32>) -> f32 {
    return dot(m[0], m[0]) + dot(m[1], m[1]) + dot(m[2], m[2]);
}

// dJ/dF, column by column as cross products (defined for singular F).
fn cofactor(f: mat3x3<f32>) -> mat3x3<f32> {
    return mat3x3<f32>(cross(f[1], f[2]), cross(f[2], f[0]), cross(f[0], f[1]));
}

// J - 1 = tr H + (tr^2 H - tr H^2) / 2 + det H.
fn j_minus_one(h: mat3x3<f32>) -> f32 {
    let t = trace3(h);
    return t + 0.5 * (t * t - trace3(h * h)) + determinant(h);
}

// ln(1 + x) without losing x when it is tiny.
fn ln_1p(x: f32) -> f32 {
    let u = 1.0 + x;
    if (u == 1.0) {
        return x;
    }
    return log(u) * x / (u - 1.0);
}

fn identity3() -> mat3x3<f32> {
    return mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0), vec3<f32>(0.0, 1.0, 0.0), vec3<f32>(0.0, 0.0, 1.0));
}

// Where neo-Hookean's energy is +inf in f32: J at or below f32's resolution of it, not only
// J <= 0. J - 1 sums terms of the size of |F|^3 (mean column norms), each rounded to ~1e-7 of
// that, so J below 1e-5 |F|^3 is noise: with J <= 0 alone, stabilized steps of a kicked soft
// bar were accepted at J ~ 3e-8 where the CPU's f64 found the tet inverted, and the next
// step failed (its potential infinite). The margin keeps every state the GPU accepts inside
// the domain in f64 too; the CPU twin, in f64, keeps J > 0.
fn outside_neo_hookean(h: mat3x3<f32>, jm1: f32) -> bool {
    let scale = max(squared_norm(identity3() + h) / 3.0, 1.0);
    return 1.0 + jm1 <= 1e-5 * scale * sqrt(scale);
}

// Energy density of the displacement gradient h = F - I; +inf where neo-Hookean is
// undefined (`outside_neo_hookean`).
fn energy_density(h: mat3x3<f32>, m: Lame) -> f32 {
    if (m.model == STVK) {
        let e = (h + transpose(h) + transpose(h) * h) * 0.5;
        let tr = trace3(e);
        return m.mu * squared_norm(e) + 0.5 * m.lambda * tr * tr;
    }
    let jm1 = j_minus_one(h);
    if (m.model == NEO_HOOKEAN) {
        if (outside_neo_hookean(h, jm1)) {
            return bitcast<f32>(0x7f800000u);
        }
        let lnj = ln_1p(jm1);
        return 0.5 * m.mu * squared_norm(h) + m.mu * (trace3(h) - lnj) + 0.5 * m.lambda * lnj * lnj;
    }
    let l = m.lambda + m.mu;
    return 0.5 * m.mu * squared_norm(h) - m.mu * (jm1 - trace3(h)) + 0.5 * l * jm1 * jm1;
}

// First Piola-Kirchhoff stress P = dpsi/dF at F = I + h.
fn first_piola(h: mat3x3<f32>, m: Lame) -> mat3x3<f32> {
    let f = identity3() + h;
    if (m.model == STVK) {
        let e = (h + transpose(h) + transpose(h) * h) * 0.5;
        return f * (e * (2.0 * m.mu) + identity3() * (m.lambda * trace3(e)));
    }
    let c = cofactor(f);
    let jm1 = j_minus_one(h);
    if (m.model == NEO_HOOKEAN) {
        // F^-T = cof F / J
        return f * m.mu + c * ((m.lambda * ln_1p(jm1) - m.mu) / (1.0 + jm1));
    }
    let l = m.lambda + m.mu;
    return f * m.mu + c * (l * jm1 - m.mu);
}

// Frobenius product A : B.
fn frobenius(a: mat3x3<f32>, b: mat3x3<f32>) -> f32 {
    return dot(a[0], b[0]) + dot(a[1], b[1]) + dot(a[2], b[2]);
}

// d(cof F)[dF]: the cofactor's columns are cross products of F's columns.
fn cofactor_differential(f: mat3x3<f32>, df: mat3x3<f32>) -> mat3x3<f32> {
    return mat3x3<f32>(
        cross(df[1], f[2]) + cross(f[1], df[2]),
        cross(df[2], f[0]) + cross(f[2], df[0]),
        cross(df[0], f[1]) + cross(f[0], df[1]),
    );
}
