package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadme builds every Go block of the README as the program, or the
// test file (package …_test), it is, so that the README's code stays true to
// the API.
// testFile matches a block that is a test file rather than a program.
var testFile = regexp.MustCompile(`(?m)^package \w+_test$`)

func TestReadme(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(readme, -1)
	require.NotEmpty(t, blocks, "the README has no Go block")
	for i, b := range blocks {
		// A directory inside the module, so the program builds against this
		// checkout; "_" keeps it out of ./... patterns.
		dir, err := os.MkdirTemp(".", "_readme")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		abs, err := filepath.Abs(dir)
		require.NoError(t, err)
		name, build := "main.go", []string{"build", "-o", os.DevNull}
		if testFile.Match(b[1]) {
			name, build = "readme_test.go", []string{"test", "-c", "-o", os.DevNull}
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b[1], 0o644))
		out, err := exec.Command("go", append(build, abs)...).CombinedOutput()
		require.NoError(t, err, "README Go block %d does not build:\n%s\n%s", i+1, out, b[1])
		out, err = exec.Command("go", "vet", abs).CombinedOutput()
		require.NoError(t, err, "README Go block %d: go vet:\n%s", i+1, out)
	}
}
