// The element stage's view of a material: polynomial models through their closed forms in F
// (no SVD), rotation-based models and every projected tangent through the analytic
// eigensystem — the same split as src/material/isotropic.rs.

#import shared/material
#import shared/eigensystem

fn psi(f: mat3x3<f32>, m: Lame) -> f32 {
    if (m.model >= COROTATED) {
        return stretch_energy(signed_svd(f).s, m);
    }
    return energy_density(f, m);
}

fn piola(f: mat3x3<f32>, m: Lame) -> mat3x3<f32> {
    if (m.model >= COROTATED) {
        let svd = signed_svd(f);
        let g = stretch_derivatives(svd.s, m).grad;
        return svd.u * mat3x3<f32>(vec3<f32>(g.x, 0.0, 0.0), vec3<f32>(0.0, g.y, 0.0), vec3<f32>(0.0, 0.0, g.z)) * transpose(svd.v);
    }
    return first_piola(f, m);
}

fn dpdf(f: mat3x3<f32>, m: Lame, project: bool) -> array<array<f32, 9>, 9> {
    if (project || m.model >= COROTATED) {
        return eigensystem_tangent(signed_svd(f), m, project);
    }
    return tangent(f, m);
}
