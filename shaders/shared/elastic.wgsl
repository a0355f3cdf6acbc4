// The element stage's view of a material: polynomial models through their closed forms in F
// (no SVD); corotated and ARAP through the closest rotation (Newton's method on SO(3) from the
// identity) and its derivative; fixed corotated and every projected tangent through the
// analytic eigensystem — the same split as src/material/isotropic.rs.

#import shared/material
#import shared/eigensystem
#import shared/rotation

// Corotated and ARAP go through the closest rotation.
fn rotation_form(m: Lame) -> bool {
    return m.model == COROTATED || m.model == ARAP;
}

// Lame lambda as the rotation form uses it (ARAP has none).
fn rotation_lambda(m: Lame) -> f32 {
    return select(m.lambda, 0.0, m.model == ARAP);
}

fn corotated(h: mat3x3<f32>, m: Lame) -> Corotated {
    let q = closest_rotation(h, vec4<f32>(0.0, 0.0, 0.0, 1.0), false);
    return corotated_at(h, rotation_minus_identity(q), m.mu, rotation_lambda(m));
}

// Each takes the displacement gradient h = F - I.
fn psi(h: mat3x3<f32>, m: Lame) -> f32 {
    if (rotation_form(m)) {
        return corotated(h, m).psi;
    }
    if (m.model >= COROTATED) {
        return stretch_energy(signed_svd(identity3() + h).s, m);
    }
    return energy_density(h, m);
}

fn piola(h: mat3x3<f32>, m: Lame) -> mat3x3<f32> {
    if (rotation_form(m)) {
        return corotated(h, m).p;
    }
    if (m.model >= COROTATED) {
        let svd = signed_svd(identity3() + h);
        let g = stretch_derivatives(svd.s, m).grad;
        return svd.u * mat3x3<f32>(vec3<f32>(g.x, 0.0, 0.0), vec3<f32>(0.0, g.y, 0.0), vec3<f32>(0.0, 0.0, g.z)) * transpose(svd.v);
    }
    return first_piola(h, m);
}

// What applying dP/dF to a direction needs, prepared once per element and node. Polynomial
// models with the exact tangent use closed forms in F (`f`, a model matrix `g` and a scalar
// `c`); corotated and ARAP with the exact tangent (`closed`) the closest rotation `g`, the
// inverse `h_inv` of tr(S) I - S and `c` = lambda (tr S - 3) - 2 mu; fixed corotated and
// every projected tangent the analytic eigensystem in the frame of the signed SVD
// F = U diag(s) V^T: the stretch Hessian `a` (its eigenvalues replaced by their magnitudes
// when projected) and the flip and twist moduli of the three pairs. No 9x9 array: the
// Hessian is built from 3x3 products with constant indices.
struct Tangent {
    f: mat3x3<f32>,
    g: mat3x3<f32>,
    c: f32,
    closed: bool,
    h_inv: mat3x3<f32>,
    u: mat3x3<f32>,
    v: mat3x3<f32>,
    a: mat3x3<f32>,
    flip: vec3<f32>,
    twist: vec3<f32>,
}

fn uses_eigensystem(m: Lame, project: bool) -> bool {
    return project || m.model >= COROTATED;
}

fn prepare_tangent(h: mat3x3<f32>, m: Lame, project: bool) -> Tangent {
    let f = identity3() + h;
    var t: Tangent;
    t.f = f;
    t.closed = false;
    if (!project && rotation_form(m)) {
        // The polar rotation's derivative: (tr S I - S) w = axial(R^T dF - dF^T R), dR = R [w]x,
        // with S = R^T F = I + sym(D); unless tr S I - S is near singular (a flat or
        // half-inverted element), which the eigensystem handles.
        let rmi = rotation_minus_identity(closest_rotation(h, vec4<f32>(0.0, 0.0, 0.0, 1.0), false));
        let d = rotated_strain(rmi, h);
        let trace = d[0].x + d[1].y + d[2].z;
        let a = (2.0 + trace) * identity3() - (d + transpose(d)) * 0.5;
        let cof = cofactor(a);
        let det = dot(a[0], cof[0]);
        let scale = max(max(max(abs(f[0].x), abs(f[0].y)), max(abs(f[0].z), abs(f[1].x))),
            max(max(abs(f[1].y), abs(f[1].z)), max(max(abs(f[2].x), abs(f[2].y)), abs(f[2].z))));
        if (det > 1e-6 * scale * scale * scale && a[0].x > 1e-6 * scale) {
            t.closed = true;
            t.g = identity3() + rmi;
            // The inverse of a symmetric matrix: its cofactor matrix over the determinant.
            t.h_inv = cof * (1.0 / det);
            t.c = rotation_lambda(m) * trace - 2.0 * m.mu;
            return t;
        }
    }
    if (uses_eigensystem(m, project)) {
        let svd = signed_svd(f);
        let d = stretch_derivatives(svd.s, m);
        t.u = svd.u;
        t.v = svd.v;
        t.a = d.hess;
        t.flip = d.flip;
        t.twist = d.twist;
        if (project) {
            let e = symmetric_eigen3(d.hess);
            let q = e.vectors;
            let l = abs(e.values);
            t.a = outer3(q[0], q[0]) * l.x + outer3(q[1], q[1]) * l.y + outer3(q[2], q[2]) * l.z;
            t.flip = abs(d.flip);
            t.twist = abs(d.twist);
        }
        return t;
    }
    if (m.model == STVK) {
        let e = (h + transpose(h) + transpose(h) * h) * 0.5;
        t.g = e * (2.0 * m.mu) + identity3() * (m.lambda * trace3(e));
        return t;
    }
    let jm1 = j_minus_one(h);
    if (m.model == NEO_HOOKEAN) {
        // F^-T = cof F / J.
        t.g = cofactor(f) * (1.0 / (1.0 + jm1));
        t.c = m.lambda * ln_1p(jm1) - m.mu;
        return t;
    }
    t.g = cofactor(f);
    t.c = (m.lambda + m.mu) * jm1 - m.mu;
    return t;
}

// dP/dF : df, the twin of the tangents of src/material/isotropic.rs applied to a direction.
fn tangent_times(t: Tangent, m: Lame, project: bool, df: mat3x3<f32>) -> mat3x3<f32> {
    if (t.closed) {
        // dP = 2 mu dF + lambda (R : dF) R + (lambda (tr S - 3) - 2 mu) dR.
        let b = transpose(t.g) * df;
        let w = t.h_inv * vec3<f32>(b[1].z - b[2].y, b[2].x - b[0].z, b[0].y - b[1].x);
        return df * (2.0 * m.mu) + t.g * (rotation_lambda(m) * frobenius(t.g, df)) + t.g * cross_matrix(w) * t.c;
    }
    if (uses_eigensystem(m, project)) {
        // In the SVD frame: the diagonal through the stretch Hessian, each off-diagonal pair
        // through its flip (symmetric) and twist (antisymmetric) modulus.
        let h = transpose(t.u) * df * t.v;
        let d = t.a * vec3<f32>(h[0][0], h[1][1], h[2][2]);
        let s12 = 0.5 * (h[2][1] + h[1][2]) * t.flip.x;
        let k12 = 0.5 * (h[2][1] - h[1][2]) * t.twist.x;
        let s02 = 0.5 * (h[2][0] + h[0][2]) * t.flip.y;
        let k02 = 0.5 * (h[2][0] - h[0][2]) * t.twist.y;
        let s01 = 0.5 * (h[1][0] + h[0][1]) * t.flip.z;
        let k01 = 0.5 * (h[1][0] - h[0][1]) * t.twist.z;
        let r = mat3x3<f32>(
            vec3<f32>(d.x, s01 - k01, s02 - k02),
            vec3<f32>(s01 + k01, d.y, s12 - k12),
            vec3<f32>(s02 + k02, s12 + k12, d.z),
        );
        return t.u * r * transpose(t.v);
    }
    if (m.model == STVK) {
        // P = F S: dP = dF S + F dS, dS = 2 mu dE + lambda tr(dE) I, dE = sym(F^T dF).
        let ftdf = transpose(t.f) * df;
        let de = (ftdf + transpose(ftdf)) * 0.5;
        let ds = de * (2.0 * m.mu) + identity3() * (m.lambda * trace3(de));
        return df * t.g + t.f * ds;
    }
    if (m.model == NEO_HOOKEAN) {
        // P = mu F + c F^-T: dP = mu dF + lambda (F^-T : dF) F^-T - c F^-T dF^T F^-T.
        return df * m.mu + t.g * (m.lambda * frobenius(t.g, df)) - t.g * transpose(df) * t.g * t.c;
    }
    // Stable neo-Hookean, P = mu F + c cof F: dP = mu dF + (l cof F : dF) cof F + c dcof.
    return df * m.mu + t.g * ((m.lambda + m.mu) * frobenius(t.g, df)) + cofactor_differential(t.f, df) * t.c;
}
