// The element stage's view of a material: polynomial models through their closed forms in F
// (no SVD), rotation-based models and every projected tangent through the analytic
// eigensystem — the same split as src/material/isotropic.rs.

#import shared/material
#import shared/eigensystem

// Each takes the displacement gradient h = F - I.
fn psi(h: mat3x3<f32>, m: Lame) -> f32 {
    if (m.model >= COROTATED) {
        return stretch_energy(signed_svd(identity3() + h).s, m);
    }
    return energy_density(h, m);
}

fn piola(h: mat3x3<f32>, m: Lame) -> mat3x3<f32> {
    if (m.model >= COROTATED) {
        let svd = signed_svd(identity3() + h);
        let g = stretch_derivatives(svd.s, m).grad;
        return svd.u * mat3x3<f32>(vec3<f32>(g.x, 0.0, 0.0), vec3<f32>(0.0, g.y, 0.0), vec3<f32>(0.0, 0.0, g.z)) * transpose(svd.v);
    }
    return first_piola(h, m);
}

// What applying dP/dF to a direction needs, prepared once per element and node. Polynomial
// models with the exact tangent use closed forms in F (`f`, a model matrix `g` and a scalar
// `c`); the rotation-based models and every projected tangent use the analytic eigensystem
// in the frame of the signed SVD F = U diag(s) V^T: the stretch Hessian `a` (its eigenvalues
// replaced by their magnitudes when projected) and the flip and twist moduli of the three
// pairs. No 9x9 array: the Hessian is built from 3x3 products with constant indices.
struct Tangent {
    f: mat3x3<f32>,
    g: mat3x3<f32>,
    c: f32,
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
