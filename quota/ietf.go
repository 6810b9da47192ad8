package quota

import (
	"net/http"
	"time"
)

// appendIETF appends the policies of the RateLimit and RateLimit-Policy
// fields: one for each service limit of RateLimit, joined by name with the
// quota policy of the same name, then one for each quota policy that no
// service limit names. A field whose value is not a valid List is ignored
// whole; a member without its required parameter (r, q) or without a
// String or Token name is ignored alone.
func appendIETF(dst []Policy, h http.Header, now time.Time) []Policy {
	limits := parseSFField(h["Ratelimit"])
	policies := parseSFField(h["Ratelimit-Policy"])
	start := len(dst)
	for _, m := range limits {
		name, ok := policyName(m.val)
		if !ok {
			continue
		}
		r, _ := m.param("r")
		remaining, ok := count(r)
		if !ok {
			continue
		}
		p := Policy{Source: IETF, Unit: Requests, Name: name, Limit: -1, Remaining: remaining}
		if t, ok := m.param("t"); ok {
			if d, ok := seconds(t, MaxReset); ok {
				p.Reset = now.Add(d)
			}
		}
		for _, q := range policies {
			if n, ok := policyName(q.val); ok && n == name && applyPolicy(&p, q) {
				break
			}
		}
		dst = append(dst, p)
	}
	for _, q := range policies {
		name, ok := policyName(q.val)
		if !ok || named(dst[start:], name) {
			continue
		}
		p := Policy{Source: IETF, Unit: Requests, Name: name, Limit: -1, Remaining: -1}
		if applyPolicy(&p, q) {
			dst = append(dst, p)
		}
	}
	return dst
}

// maxMembers is how many members of a RateLimit or RateLimit-Policy field
// (or of a RateLimit-Limit list) are read; the rest are neither read nor
// checked. Parsing a member allocates, and joining the two fields by name
// costs the product of their lengths, so a response cannot make Parse
// slow by sending thousands of policies.
const maxMembers = 16

// parseSFField parses the lines of one field as the single List they make
// up, up to its first maxMembers members, and returns those; nil when what
// it read is not valid.
func parseSFField(lines []string) []sfMember {
	var members []sfMember
	for _, line := range lines {
		var ok bool
		if members, ok = parseSFList(members, line, maxMembers); !ok {
			return nil
		}
	}
	return members
}

// applyPolicy sets p's limit, unit and window from the quota policy m, and
// reports whether m is valid: its q, the quota, is a non-negative Integer.
func applyPolicy(p *Policy, m sfMember) bool {
	q, _ := m.param("q")
	limit, ok := count(q)
	if !ok {
		return false
	}
	p.Limit = limit
	if qu, ok := m.param("qu"); ok && (qu.kind == sfString || qu.kind == sfToken) && qu.str != "" {
		p.Unit = Unit(qu.str)
	}
	if w, ok := m.param("w"); ok {
		if d, ok := seconds(w, MaxReset); ok && d > 0 {
			p.Window = d
		}
	}
	return true
}

// named reports whether a policy of ps is called name.
func named(ps []Policy, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

// policyName returns the name a member gives its policy: a String, as the
// draft says, or a Token.
func policyName(v sfValue) (string, bool) {
	return v.str, v.kind == sfString || v.kind == sfToken
}

// count returns v as a count: a non-negative Integer, at most MaxCount.
func count(v sfValue) (int64, bool) {
	if v.kind != sfInteger || v.num < 0 {
		return 0, false
	}
	return int64(v.num), true
}

// seconds returns v, a non-negative Integer or Decimal number of seconds,
// as a duration capped at limit.
func seconds(v sfValue, limit time.Duration) (time.Duration, bool) {
	if (v.kind != sfInteger && v.kind != sfDecimal) || !(v.num >= 0) {
		return 0, false
	}
	return parseDelayFloat(v.num, time.Second, limit), true
}
