// Invocations per workgroup in every stage (`WORKGROUP` in src/backend/gpu/stage.rs).
const WORKGROUP: u32 = 256u;

// A dispatch beyond the 65 535 workgroups one dimension allows spans two (rows of
// `groups.x`): the workgroup's place in the whole dispatch. The last row may run past the
// work; entries check their index, and a workgroup past the end writes no partial sum.
fn workgroup_slot(group: vec3<u32>, groups: vec3<u32>) -> u32 {
    return group.x + group.y * groups.x;
}

// A batch of positions repeats a run's workgroups (those of `count` items) once per member:
// the workgroup's member and its slot within that member's run.
fn batch_place(group: vec3<u32>, groups: vec3<u32>, count: u32) -> vec2<u32> {
    let slot = workgroup_slot(group, groups);
    let per_member = max((count + WORKGROUP - 1u) / WORKGROUP, 1u);
    let member = slot / per_member;
    return vec2<u32>(member, slot - member * per_member);
}
