package quota

import (
	"math"
	"strconv"
	"strings"
)

// This file parses the Structured Field lists of the IETF fields (RFC 9651
// §4.2.1), leniently in one respect: an Integer longer than 15 digits, or a
// Decimal longer than 12.3 digits, is read (and capped by its caller)
// rather than refused.

// sfKind is the type of a Structured Field bare item.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
	sfDate
	sfDisplayString
	sfInnerList
)

// sfValue is a bare item: num holds an Integer (saturated at ±MaxCount), a
// Decimal, a Boolean (0 or 1) or a Date; str holds a String (unescaped), a
// Token, a Byte Sequence (still base64) or a Display String (still
// percent-encoded).
type sfValue struct {
	kind sfKind
	num  float64
	str  string
}

type sfParam struct {
	key string
	val sfValue
}

// sfMember is a list member: an Item, or an Inner List (whose items are
// parsed and dropped), with its parameters.
type sfMember struct {
	val    sfValue
	params []sfParam
}

// param returns the value of the member's parameter key, which for a key
// given twice is the last one, as RFC 9651 says.
func (m sfMember) param(key string) (sfValue, bool) {
	for i := len(m.params) - 1; i >= 0; i-- {
		if m.params[i].key == key {
			return m.params[i].val, true
		}
	}
	return sfValue{}, false
}

// sfParser reads one field line.
type sfParser struct {
	s string
	i int
}

// parseSFList appends the members of the List in the field line s to dst,
// until dst holds limit members: the rest of the line is neither read nor
// checked, so that a field of thousands of members costs no more than
// limit of them. On a syntax error in what it reads it returns dst
// unchanged and false.
func parseSFList(dst []sfMember, s string, limit int) ([]sfMember, bool) {
	n := len(dst)
	p := sfParser{s: s}
	p.skipSP()
	for p.i < len(p.s) && len(dst) < limit {
		m, ok := p.member()
		if !ok {
			return dst[:n], false
		}
		dst = append(dst, m)
		p.skipOWS()
		if p.i == len(p.s) {
			return dst, true
		}
		if p.s[p.i] != ',' {
			return dst[:n], false
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return dst[:n], false // a trailing comma
		}
	}
	return dst, true
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) member() (sfMember, bool) {
	var m sfMember
	var ok bool
	if p.i < len(p.s) && p.s[p.i] == '(' {
		ok = p.innerList()
		m.val.kind = sfInnerList
	} else {
		m.val, ok = p.bareItem()
	}
	if !ok {
		return m, false
	}
	m.params, ok = p.parameters()
	return m, ok
}

func (p *sfParser) innerList() bool {
	p.i++ // '('
	for p.i < len(p.s) {
		p.skipSP()
		if p.i < len(p.s) && p.s[p.i] == ')' {
			p.i++
			return true
		}
		if _, ok := p.bareItem(); !ok {
			return false
		}
		if _, ok := p.parameters(); !ok {
			return false
		}
		if p.i < len(p.s) && p.s[p.i] != ' ' && p.s[p.i] != ')' {
			return false
		}
	}
	return false
}

func (p *sfParser) parameters() ([]sfParam, bool) {
	var params []sfParam
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		val := sfValue{kind: sfBoolean, num: 1}
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if val, ok = p.bareItem(); !ok {
				return nil, false
			}
		}
		params = append(params, sfParam{key, val})
	}
	return params, true
}

func (p *sfParser) key() (string, bool) {
	start := p.i
	if p.i == len(p.s) || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", false
	}
	for p.i++; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		if !isLCAlpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
	}
	return p.s[start:p.i], true
}

func (p *sfParser) bareItem() (sfValue, bool) {
	if p.i == len(p.s) {
		return sfValue{}, false
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.string()
	case c == '*' || isAlpha(c):
		return p.token(), true
	case c == ':':
		return p.byteSequence()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.i++
		v, ok := p.number()
		return sfValue{kind: sfDate, num: v.num}, ok && v.kind == sfInteger
	case c == '%':
		return p.displayString()
	}
	return sfValue{}, false
}

func (p *sfParser) number() (sfValue, bool) {
	start := p.i
	sign := 1.0
	if p.i < len(p.s) && p.s[p.i] == '-' {
		sign = -1
		p.i++
	}
	digits := p.i
	if !p.digits() {
		return sfValue{}, false
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		if !p.digits() {
			return sfValue{}, false
		}
		// Digits only, so ParseFloat can only fail on range: saturate as
		// an Integer does, so that one member's oversized value does not
		// drop the whole field.
		f, err := strconv.ParseFloat(p.s[start:p.i], 64)
		if err != nil && math.IsInf(f, 0) {
			f = sign * float64(MaxCount)
		}
		return sfValue{kind: sfDecimal, num: f}, true
	}
	n, _ := parseCount(p.s[digits:p.i]) // saturates at MaxCount
	return sfValue{kind: sfInteger, num: sign * float64(n)}, true
}

// digits skips a run of digits and reports whether there was one.
func (p *sfParser) digits() bool {
	start := p.i
	for p.i < len(p.s) && isDigit(p.s[p.i]) {
		p.i++
	}
	return p.i > start
}

func (p *sfParser) string() (sfValue, bool) {
	p.i++ // '"'
	start := p.i
	var b *strings.Builder // only for a string with escapes
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '"':
			v := p.s[start:p.i]
			if b != nil {
				b.WriteString(v)
				v = b.String()
			}
			p.i++
			return sfValue{kind: sfString, str: v}, true
		case c == '\\':
			if p.i+1 == len(p.s) || (p.s[p.i+1] != '"' && p.s[p.i+1] != '\\') {
				return sfValue{}, false
			}
			if b == nil {
				b = new(strings.Builder)
			}
			b.WriteString(p.s[start:p.i])
			p.i++
			start = p.i // the escaped character starts the next run
			p.i++
		case c < 0x20 || c > 0x7e:
			return sfValue{}, false
		default:
			p.i++
		}
	}
	return sfValue{}, false
}

func (p *sfParser) token() sfValue {
	start := p.i
	for p.i++; p.i < len(p.s) && (isTChar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/'); p.i++ {
	}
	return sfValue{kind: sfToken, str: p.s[start:p.i]}
}

func (p *sfParser) byteSequence() (sfValue, bool) {
	p.i++ // ':'
	start := p.i
	for ; p.i < len(p.s) && p.s[p.i] != ':'; p.i++ {
		if c := p.s[p.i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return sfValue{}, false
		}
	}
	if p.i == len(p.s) {
		return sfValue{}, false
	}
	p.i++
	return sfValue{kind: sfBytes, str: p.s[start : p.i-1]}, true
}

func (p *sfParser) boolean() (sfValue, bool) {
	if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
		p.i += 2
		return sfValue{kind: sfBoolean, num: float64(p.s[p.i-1] - '0')}, true
	}
	return sfValue{}, false
}

func (p *sfParser) displayString() (sfValue, bool) {
	if p.i+1 == len(p.s) || p.s[p.i+1] != '"' {
		return sfValue{}, false
	}
	p.i += 2
	start := p.i
	for ; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == '"':
			p.i++
			return sfValue{kind: sfDisplayString, str: p.s[start : p.i-1]}, true
		case c < 0x20 || c > 0x7e:
			return sfValue{}, false
		}
	}
	return sfValue{}, false
}

func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }

func isAlpha(c byte) bool { return isLCAlpha(c) || 'A' <= c && c <= 'Z' }

// isTChar reports whether c is a tchar of RFC 9110 §5.6.2.
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
