// The product of the coupling blocks with a vector (shared/couplings): the stage that imports
// this defines `coupled_vector(u)`, the vector at vertex u.

#import shared/couplings

// Row v of the set's blocks between vertices times `coupled_vector`.
fn coupling_row(v: u32, records: CouplingSet) -> vec3<f32> {
    var row = vec3<f32>(0.0);
    for (var k = coupling_offsets[records.offsets + v]; k < coupling_offsets[records.offsets + v + 1u]; k++) {
        let slot = records.records + coupling_list[records.list + k];
        let vertices = record_vertices(slot);
        let c = coupling_records[RECORD * slot + 1u];
        let i = record_role(vertices, v);
        var sum = vec3<f32>(0.0);
        for (var j = 0u; j < 4u; j++) {
            if (j != i) {
                sum += coupled_vector(vertices[j]) * c[j];
            }
        }
        row += record_block(slot) * sum * c[i];
    }
    return row;
}
