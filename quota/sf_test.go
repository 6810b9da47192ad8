package quota

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSFList(t *testing.T) {
	t.Parallel()
	valid := map[string][]sfValue{
		``:                    nil,
		`  "a"  `:             {{kind: sfString, str: "a"}},
		"\"a\" ,\tb":          {{kind: sfString, str: "a"}, {kind: sfToken, str: "b"}},
		`*tok/en:1`:           {{kind: sfToken, str: "*tok/en:1"}},
		`-12, 1.5, -0.25`:     {{kind: sfInteger, num: -12}, {kind: sfDecimal, num: 1.5}, {kind: sfDecimal, num: -0.25}},
		`1234567890123456789`: {{kind: sfInteger, num: MaxCount}},
		`1` + strings.Repeat("0", 400) + `.5, -1` + strings.Repeat("0", 400) + `.5`: {
			{kind: sfDecimal, num: MaxCount}, {kind: sfDecimal, num: -MaxCount}}, // saturated as an Integer, not refused
		`?0, ?1`:                   {{kind: sfBoolean, num: 0}, {kind: sfBoolean, num: 1}},
		`:YWJj:, ::`:               {{kind: sfBytes, str: "YWJj"}, {kind: sfBytes, str: ""}},
		`@1659578233`:              {{kind: sfDate, num: 1659578233}},
		`%"caf%c3%a9"`:             {{kind: sfDisplayString, str: "caf%c3%a9"}},
		`(), ("a" b);x=1, ( 1 2 )`: {{kind: sfInnerList}, {kind: sfInnerList}, {kind: sfInnerList}},
		`"q\"\\"`:                  {{kind: sfString, str: `q"\`}},
	}
	for in, want := range valid {
		members, ok := parseSFList(nil, in, maxMembers)
		require.True(t, ok, "%q is valid", in)
		var got []sfValue
		for _, m := range members {
			got = append(got, m.val)
		}
		require.Equal(t, want, got, "%q", in)
	}
	invalid := []string{
		`"a",`, `,`, `"a" "b"`, `"a`, `"\x"`, "\"\x01\"", `-`, `1.`, `-a`, `?2`, `?`, `:abc`, `:a-b:`,
		`@`, `@1.5`, `%a`, `%"a`, `(a`, `(a,b)`, `(a)b`, `a;`, `a;B=1`, `a;x=`, `a;x="`, `{`, "a\t,\tb,",
	}
	for _, in := range invalid {
		_, ok := parseSFList(nil, in, maxMembers)
		require.False(t, ok, "%q is invalid", in)
	}
}

func TestSFParameters(t *testing.T) {
	t.Parallel()
	members, ok := parseSFList(nil, `"a";r=1;flag;r=2;t=1.5;pk=:YQ==:`, maxMembers)
	require.True(t, ok)
	require.Len(t, members, 1)
	r, ok := members[0].param("r")
	require.True(t, ok)
	require.Equal(t, sfValue{kind: sfInteger, num: 2}, r, "the last of a repeated key wins")
	flag, ok := members[0].param("flag")
	require.True(t, ok)
	require.Equal(t, sfValue{kind: sfBoolean, num: 1}, flag, "a key without a value is true")
	_, ok = members[0].param("q")
	require.False(t, ok)
}
