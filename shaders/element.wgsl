// Stage `element`: per-element energy, corner gradients and upper Hessian blocks at the step
// objective's quadrature nodes. The twin of src/backend/cpu/element.rs: the same values, in
// the structure-of-arrays slots of shared/slots.wgsl, so that consecutive elements (threads)
// write consecutive floats. Energies are summed per workgroup in a fixed tree order; the
// host adds the partials in order, so the total is the same bits every run.
//
// Each pipeline is specialized by two override constants: what it computes (OUTPUTS) and,
// for a run of tets of one material, which material (MATERIAL), so that an energy pass
// carries no derivative code and StVK no SVD. The element Hessian is built column by column
// from the tangent applied to dF = e_k beta_b^T, with constant indices throughout. An
// energy-only pass may evaluate a batch of positions at once (shared/tets' `members`).

#import shared/elastic
#import shared/reduce
#import shared/spring
#import shared/slots
#import shared/tets

// 0: energy only; 1: and corner gradients; 2: and exact Hessian blocks; 3: and projected ones.
override OUTPUTS: u32 = 2u;
// A material model of shared/material.wgsl and shared/eigensystem.wgsl, or ANY_MATERIAL to
// read it per tet.
override MATERIAL: u32 = 6u;
const ANY_MATERIAL: u32 = 6u;

@group(1) @binding(3) var<storage, read> springs: array<u32>;
// Per spring: (kind, stiffness, rest, 0).
@group(1) @binding(4) var<storage, read> spring_laws: array<vec4<f32>>;
// Per spring: its rest edge X_j - X_i (from f64), to which the displacements add.
@group(1) @binding(5) var<storage, read> spring_edges: array<vec4<f32>>;

@group(3) @binding(0) var<storage, read_write> corner_gradients: array<vec4<f32>>;
@group(3) @binding(1) var<storage, read_write> element_blocks: array<vec4<f32>>;
@group(3) @binding(2) var<storage, read_write> energy_partials: array<f32>;

// Column k of upper block u: entries (i, k).
fn store_column(e: u32, u: u32, k: u32, column: vec3<f32>) {
    element_blocks[tet_block_column(e, u, k, params.tet_count)] = vec4<f32>(column, 0.0);
}

// The weighted tangents of both nodes applied to df.
struct Tangents {
    t0: Tangent,
    t1: Tangent,
    w0: f32,
    w1: f32,
    two: bool,
}

fn apply(t: Tangents, m: Lame, df: mat3x3<f32>) -> mat3x3<f32> {
    let project = OUTPUTS == 3u;
    var r = tangent_times(t.t0, m, project, df) * t.w0;
    if (t.two) {
        r += tangent_times(t.t1, m, project, df) * t.w1;
    }
    return r;
}

fn tet(e: u32) -> f32 {
    let t = load_tet(e);
    var m = lame(tet_material[e]);
    if (MATERIAL != ANY_MATERIAL) {
        m.model = MATERIAL;
    }
    let two = params.node_count == 2u;
    let n0 = node(0u);
    let n1 = node(1u);
    let h0 = displacement_gradient(t, n0.y);
    var h1 = h0;
    var energy = n0.x * t.volume * psi(h0, m);
    if (two) {
        h1 = displacement_gradient(t, n1.y);
        energy += n1.x * t.volume * psi(h1, m);
    }
    if (OUTPUTS >= 1u) {
        // g_a = sum_q c_q theta_q V P(F_q) beta_a.
        var p = piola(h0, m) * (n0.x * n0.y * t.volume);
        if (two) {
            p += piola(h1, m) * (n1.x * n1.y * t.volume);
        }
        store_corner(e, 0u, p * t.b0);
        store_corner(e, 1u, p * t.b1);
        store_corner(e, 2u, p * t.b2);
        store_corner(e, 3u, p * t.b3);
    }
    if (OUTPUTS >= 2u) {
        let project = OUTPUTS == 3u;
        var tangents: Tangents;
        tangents.t0 = prepare_tangent(h0, m, project);
        tangents.w0 = n0.x * n0.y * n0.y * t.volume;
        tangents.two = two;
        if (two) {
            tangents.t1 = prepare_tangent(h1, m, project);
            tangents.w1 = n1.x * n1.y * n1.y * t.volume;
        }
        // Column k of H_ab is dP(e_k beta_b^T) beta_a; upper blocks (a <= b) are stored,
        // numbered (0,0) 0, (0,1) 1, (0,2) 2, (0,3) 3, (1,1) 4, (1,2) 5, (1,3) 6, (2,2) 7,
        // (2,3) 8, (3,3) 9.
        for (var k = 0u; k < 3u; k++) {
            let ek = vec3<f32>(f32(k == 0u), f32(k == 1u), f32(k == 2u));
            let d0 = apply(tangents, m, outer3(ek, t.b0));
            store_column(e, 0u, k, d0 * t.b0);
            let d1 = apply(tangents, m, outer3(ek, t.b1));
            store_column(e, 1u, k, d1 * t.b0);
            store_column(e, 4u, k, d1 * t.b1);
            let d2 = apply(tangents, m, outer3(ek, t.b2));
            store_column(e, 2u, k, d2 * t.b0);
            store_column(e, 5u, k, d2 * t.b1);
            store_column(e, 7u, k, d2 * t.b2);
            let d3 = apply(tangents, m, outer3(ek, t.b3));
            store_column(e, 3u, k, d3 * t.b0);
            store_column(e, 6u, k, d3 * t.b1);
            store_column(e, 8u, k, d3 * t.b2);
            store_column(e, 9u, k, d3 * t.b3);
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
        let d = spring_edges[s].xyz + (point(j, cw.y) - point(i, cw.y));
        energy += cw.x * spring_energy(d, law);
        if (OUTPUTS >= 1u) {
            g += spring_gradient(d, law) * (cw.x * cw.y);
        }
        if (OUTPUTS >= 2u) {
            h += spring_hessian(d, law, OUTPUTS == 3u) * (cw.x * cw.y * cw.y);
        }
    }
    if (OUTPUTS >= 1u) {
        corner_gradients[spring_corner(s, 0u, params.tet_count, params.spring_count)] = vec4<f32>(-g, 0.0);
        corner_gradients[spring_corner(s, 1u, params.tet_count, params.spring_count)] = vec4<f32>(g, 0.0);
    }
    if (OUTPUTS >= 2u) {
        // Upper blocks (0,0), (0,1), (1,1) of [[H, -H], [-H, H]], by column.
        for (var c = 0u; c < 3u; c++) {
            let column = vec4<f32>(h[c], 0.0);
            element_blocks[spring_block_column(s, 0u, c, params.tet_count, params.spring_count)] = column;
            element_blocks[spring_block_column(s, 1u, c, params.tet_count, params.spring_count)] = -column;
            element_blocks[spring_block_column(s, 2u, c, params.tet_count, params.spring_count)] = column;
        }
    }
    return energy;
}

@compute @workgroup_size(WORKGROUP)
fn tets_main(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = run_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    var energy = 0.0;
    if (index < params.count && in_batch()) {
        energy = tet(params.first + index);
    }
    reduce(lid, slot, energy);
}

@compute @workgroup_size(WORKGROUP)
fn springs_main(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = run_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    var energy = 0.0;
    if (index < params.count && in_batch()) {
        energy = spring(params.first + index);
    }
    reduce(lid, slot, energy);
}
