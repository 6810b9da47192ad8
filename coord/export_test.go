package coord

// SetSkipValidation makes p send reports to the database unchecked, so the
// external tests can exercise the SQL's own validation.
func SetSkipValidation(p *Postgres, skip bool) { p.skipValidation = skip }

// SkipsValidation reports whether p sends reports unchecked.
func SkipsValidation(p *Postgres) bool { return p.skipValidation }

// Fixtures of core_test.go, shared with the external test package.
var (
	T0      = t0
	Rep     = rep
	Applied = applied
)

// TTL is core_test.go's lease TTL.
const TTL = ttl

// Apportion is apportion for the claim (nodeID, instance, want) among the
// others (wants[i], ids[i], instances[i]).
func Apportion(total, want int64, nodeID, instance string, wants []int64, ids, instances []string) int64 {
	others := make([]claim[int64], len(wants))
	for i := range wants {
		others[i] = claim[int64]{ids[i], instances[i], wants[i]}
	}
	return apportion(total, claim[int64]{nodeID, instance, want}, others)
}
