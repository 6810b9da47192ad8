package migrations

// Querier is a pool or one of its connections, as ReadApplied reads with.
type Querier = querier

// ReadApplied is one look of Status's at the applied versions, through q.
var ReadApplied = readApplied
