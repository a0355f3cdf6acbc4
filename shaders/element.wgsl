// Stage `element`: per-element energy, corner gradients and upper Hessian blocks at the step
// objective's quadrature nodes. The twin of src/backend/cpu/element.rs, with the same slots:
// corner a of tet e at 4e + a, corner b of spring s at 4T + 2s + b (3 floats each); upper
// block (a, b) of tet e at 10e + upper(a, b), of spring s at 10T + 3s + upper(a, b) (9 floats,
// row-major). Energies are summed per workgroup in a fixed tree order; the host adds the
// partials in order, so the total is the same bits every run.

#import shared/elastic
#import shared/reduce
#import shared/spring

struct Params {
    tet_count: u32,
    spring_count: u32,
    // 0: energy only; 1: and gradients; 2: and exact Hessian blocks; 3: and projected ones.
    outputs: u32,
    node_count: u32,
    // Quadrature nodes (c_q, theta_q); the second is unused when node_count is 1.
    weight_0: f32,
    theta_0: f32,
    weight_1: f32,
    theta_1: f32,
}

@group(0) @binding(0) var<uniform> params: Params;

@group(1) @binding(0) var<storage, read> tets: array<u32>;
// Per tet: (grad_0, volume), (grad_1, 0), (grad_2, 0), (grad_3, 0).
@group(1) @binding(1) var<storage, read> tet_rest: array<vec4<f32>>;
// Per tet: (model, mu, lambda, 0).
@group(1) @binding(2) var<storage, read> tet_material: array<vec4<f32>>;
@group(1) @binding(3) var<storage, read> springs: array<u32>;
// Per spring: (kind, stiffness, rest, 0).
@group(1) @binding(4) var<storage, read> spring_laws: array<vec4<f32>>;

@group(2) @binding(0) var<storage, read> x: array<f32>;
@group(2) @binding(1) var<storage, read> x_start: array<f32>;

@group(3) @binding(0) var<storage, read_write> corner_gradients: array<f32>;
@group(3) @binding(1) var<storage, read_write> element_blocks: array<f32>;
@group(3) @binding(2) var<storage, read_write> energy_partials: array<f32>;

fn node(q: u32) -> vec2<f32> {
    if (q == 0u) {
        return vec2<f32>(params.weight_0, params.theta_0);
    }
    return vec2<f32>(params.weight_1, params.theta_1);
}

fn point(v: u32, theta: f32) -> vec3<f32> {
    let p = vec3<f32>(x[3u * v], x[3u * v + 1u], x[3u * v + 2u]);
    let s = vec3<f32>(x_start[3u * v], x_start[3u * v + 1u], x_start[3u * v + 2u]);
    return p * theta + s * (1.0 - theta);
}

// Index of block (a, b), a <= b, among the upper blocks of an element of n corners.
fn upper(a: u32, b: u32, n: u32) -> u32 {
    return a * n - a * (a + 1u) / 2u + b;
}

// Sums `value` over workgroup `slot` of a pass over `count` elements into
// energy_partials[first + slot].
fn reduce(lid: u32, first: u32, slot: u32, count: u32, value: f32) {
    let total = workgroup_sum(lid, vec4<f32>(value, 0.0, 0.0, 0.0));
    if (lid == 0u && slot * WORKGROUP < count) {
        energy_partials[first + slot] = total.x;
    }
}

fn tet(e: u32) -> f32 {
    let v = array<u32, 4>(tets[4u * e], tets[4u * e + 1u], tets[4u * e + 2u], tets[4u * e + 3u]);
    let r0 = tet_rest[4u * e];
    let beta = array<vec3<f32>, 4>(r0.xyz, tet_rest[4u * e + 1u].xyz, tet_rest[4u * e + 2u].xyz, tet_rest[4u * e + 3u].xyz);
    let volume = r0.w;
    let material = lame(tet_material[e]);
    var energy = 0.0;
    var g: array<vec3<f32>, 4>;
    var h: array<array<f32, 9>, 10>;
    for (var q = 0u; q < params.node_count; q++) {
        let cw = node(q);
        var z: array<vec3<f32>, 4>;
        for (var a = 0u; a < 4u; a++) {
            z[a] = point(v[a], cw.y);
        }
        // F = sum_a z_a beta_a^T: column j is sum_a z_a beta_a[j].
        let f = mat3x3<f32>(
            z[0] * beta[0].x + z[1] * beta[1].x + z[2] * beta[2].x + z[3] * beta[3].x,
            z[0] * beta[0].y + z[1] * beta[1].y + z[2] * beta[2].y + z[3] * beta[3].y,
            z[0] * beta[0].z + z[1] * beta[1].z + z[2] * beta[2].z + z[3] * beta[3].z,
        );
        energy += cw.x * volume * psi(f, material);
        if (params.outputs >= 1u) {
            let p = piola(f, material) * (cw.x * cw.y * volume);
            for (var a = 0u; a < 4u; a++) {
                g[a] += p * beta[a];
            }
        }
        if (params.outputs >= 2u) {
            let k = dpdf(f, material, params.outputs == 3u);
            let w = cw.x * cw.y * cw.y * volume;
            // t[r][b] = sum_l K[r][3 kk + l] beta_b[l], as a vec3 over kk.
            var t: array<array<vec3<f32>, 4>, 9>;
            for (var r = 0u; r < 9u; r++) {
                for (var b = 0u; b < 4u; b++) {
                    for (var kk = 0u; kk < 3u; kk++) {
                        t[r][b][kk] = k[r][3u * kk] * beta[b].x + k[r][3u * kk + 1u] * beta[b].y + k[r][3u * kk + 2u] * beta[b].z;
                    }
                }
            }
            for (var a = 0u; a < 4u; a++) {
                for (var b = a; b < 4u; b++) {
                    let u = upper(a, b, 4u);
                    for (var i = 0u; i < 3u; i++) {
                        let row = t[3u * i][b] * beta[a].x + t[3u * i + 1u][b] * beta[a].y + t[3u * i + 2u][b] * beta[a].z;
                        h[u][3u * i] += w * row.x;
                        h[u][3u * i + 1u] += w * row.y;
                        h[u][3u * i + 2u] += w * row.z;
                    }
                }
            }
        }
    }
    if (params.outputs >= 1u) {
        for (var a = 0u; a < 4u; a++) {
            for (var i = 0u; i < 3u; i++) {
                corner_gradients[12u * e + 3u * a + i] = g[a][i];
            }
        }
    }
    if (params.outputs >= 2u) {
        for (var u = 0u; u < 10u; u++) {
            for (var k = 0u; k < 9u; k++) {
                element_blocks[90u * e + 9u * u + k] = h[u][k];
            }
        }
    }
    return energy;
}

fn spring(s: u32) -> f32 {
    let i = springs[2u * s];
    let j = springs[2u * s + 1u];
    let law = spring_law(spring_laws[s]);
    var energy = 0.0;
    var g = vec3<f32>(0.0);
    var h = mat3x3<f32>(vec3<f32>(0.0), vec3<f32>(0.0), vec3<f32>(0.0));
    for (var q = 0u; q < params.node_count; q++) {
        let cw = node(q);
        let d = point(j, cw.y) - point(i, cw.y);
        energy += cw.x * spring_energy(d, law);
        if (params.outputs >= 1u) {
            g += spring_gradient(d, law) * (cw.x * cw.y);
        }
        if (params.outputs >= 2u) {
            h += spring_hessian(d, law, params.outputs == 3u) * (cw.x * cw.y * cw.y);
        }
    }
    let corner = 3u * (4u * params.tet_count + 2u * s);
    if (params.outputs >= 1u) {
        for (var c = 0u; c < 3u; c++) {
            corner_gradients[corner + c] = -g[c];
            corner_gradients[corner + 3u + c] = g[c];
        }
    }
    if (params.outputs >= 2u) {
        // Upper blocks (0,0), (0,1), (1,1) of [[H, -H], [-H, H]].
        let block = 9u * (10u * params.tet_count + 3u * s);
        for (var r = 0u; r < 3u; r++) {
            for (var c = 0u; c < 3u; c++) {
                element_blocks[block + 3u * r + c] = h[c][r];
                element_blocks[block + 9u + 3u * r + c] = -h[c][r];
                element_blocks[block + 18u + 3u * r + c] = h[c][r];
            }
        }
    }
    return energy;
}

@compute @workgroup_size(WORKGROUP)
fn tets_main(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    var energy = 0.0;
    if (index < params.tet_count) {
        energy = tet(index);
    }
    reduce(lid, 0u, slot, params.tet_count, energy);
}

@compute @workgroup_size(WORKGROUP)
fn springs_main(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    var energy = 0.0;
    if (index < params.spring_count) {
        energy = spring(index);
    }
    // Spring partials follow the tets' partials.
    reduce(lid, (params.tet_count + WORKGROUP - 1u) / WORKGROUP, slot, params.spring_count, energy);
}
