// Couplings: terms that tie a vertex to vertices it shares no element with, the twin of
// `objective::Coupling` — self-contact's penalty (records written by stage `self_contact`)
// and its lagged friction (written by the host at the step's start). A record is six vec4s:
// its four vertices (bitcast; the first is NO_VERTEX in an empty record), their
// coefficients c_i (zero at pinned vertices), the gradient g per unit coefficient and the
// energy, and the three rows of its symmetric block B. Vertex i's gradient is c_i g, its
// diagonal block c_i^2 B, and its row of the product with y is c_i B sum_{j != i} c_j y_j.
//
// Three sets of 2 S records each (S boundary vertices, two quadrature nodes): set 0 is the
// Newton linearization's, which the PCG product reads; set 1 is every other evaluation's;
// set 2 is the step's friction. Per set, `coupling_offsets` (V + 1 entries) and
// `coupling_list` (8 S entries) list each vertex's records, by ascending slot.
//
// A stage that imports this binds `coupling_records`, `coupling_offsets` and `coupling_list`.

const RECORD: u32 = 6u;
const NO_VERTEX: u32 = 0xffffffffu;
const FRICTION_SET: u32 = 2u;

// Where one set starts in each buffer.
struct CouplingSet {
    records: u32,
    offsets: u32,
    list: u32,
}

fn coupling_set(index: u32, surface_count: u32, vertex_count: u32) -> CouplingSet {
    return CouplingSet(2u * index * surface_count, index * (vertex_count + 1u), 8u * index * surface_count);
}

fn record_vertices(slot: u32) -> vec4<u32> {
    return bitcast<vec4<u32>>(coupling_records[RECORD * slot]);
}

fn record_block(slot: u32) -> mat3x3<f32> {
    // Symmetric: its rows are its columns.
    let base = RECORD * slot;
    return mat3x3<f32>(coupling_records[base + 3u].xyz, coupling_records[base + 4u].xyz, coupling_records[base + 5u].xyz);
}

// Where v is among a record's vertices.
fn record_role(vertices: vec4<u32>, v: u32) -> u32 {
    return select(select(select(3u, 2u, vertices.z == v), 1u, vertices.y == v), 0u, vertices.x == v);
}
