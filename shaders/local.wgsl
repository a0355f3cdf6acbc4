// Stage `local` of the local/global solver, the twin of src/backend/cpu/local.rs: each tet's
// closest rotation at each quadrature node by Newton's method on SO(3), warm-started from the
// tet's rotation of the previous iteration (kept as a quaternion in `rotations`), then the
// energy and corner gradients of its projective (corotated or ARAP) energy in the slots of
// shared/slots.wgsl, and per-workgroup energy sums. Springs stay with the element stage.
//
// Everything is written in small quantities — the displacement gradient h = F - I, R - I from
// the quaternion, D = R^T F - I — so that nothing cancels in f32 near rest.

#import shared/rotation
#import shared/frame
#import shared/reduce
#import shared/slots
#import shared/tets

// Per node and tet (node q of tet e at q T + e): the last rotation, a unit quaternion (xyz, w),
// in the world's axes, so that it stays the warm start when the tet's part frame turns.
@group(2) @binding(2) var<storage, read_write> rotations: array<vec4<f32>>;
// The parts' frames (shared/frame): the displacements are in their axes.
@group(1) @binding(3) var<storage, read> frame_parts: array<u32>;
@group(2) @binding(3) var<storage, read> frame_offsets: array<vec4<f32>>;

@group(3) @binding(0) var<storage, read_write> corner_gradients: array<vec4<f32>>;
@group(3) @binding(1) var<storage, read_write> energy_partials: array<f32>;

// Tet e's projective energy at the nodes; its corner gradients and rotations are stored.
fn tet(e: u32) -> f32 {
    let t = load_tet(e);
    let material = tet_material[e];
    let mu = material.y;
    let lambda = select(material.z, 0.0, u32(material.x) == ARAP);
    var energy = 0.0;
    var p = mat3x3<f32>(vec3<f32>(0.0), vec3<f32>(0.0), vec3<f32>(0.0));
    let turn = part_frame(t.v.x).turn;
    for (var q = 0u; q < params.node_count; q++) {
        let cw = node(q);
        let h = displacement_gradient(t, cw.y);
        let slot = q * params.tet_count + e;
        let warm = quaternion_product(vec4<f32>(-turn.xyz, turn.w), rotations[slot]);
        let rotation = closest_rotation(h, warm, params.one_rotation_step == 1u);
        rotations[slot] = quaternion_product(turn, rotation);
        let c = corotated_at(h, rotation_minus_identity(rotation), mu, lambda);
        energy += cw.x * t.volume * c.psi;
        p += c.p * (cw.x * cw.y * t.volume);
    }
    store_corner(e, 0u, p * t.b0);
    store_corner(e, 1u, p * t.b1);
    store_corner(e, 2u, p * t.b2);
    store_corner(e, 3u, p * t.b3);
    return energy;
}

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    var energy = 0.0;
    if (index < params.count) {
        energy = tet(params.first + index);
    }
    reduce(lid, slot, energy);
}
