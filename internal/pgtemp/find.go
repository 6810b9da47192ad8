package pgtemp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
)

// ErrNotInstalled is returned by [FindBinDir] and [Start] when no directory
// holding both initdb and postgres is found on PATH or under
// /usr/lib/postgresql/*/bin.
var ErrNotInstalled = errors.New("pgtemp: initdb not found on PATH or under /usr/lib/postgresql/*/bin; install postgresql (Debian: apt-get install postgresql)")

// debianBinGlob is where Debian and Ubuntu install the server binaries of each
// major version.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// FindBinDir returns a directory holding both initdb and postgres: the
// directory of initdb on PATH (after resolving symlinks) if postgres is next
// to it, else the newest major version under /usr/lib/postgresql/*/bin. It
// returns an error wrapping [ErrNotInstalled] when there is none.
func FindBinDir() (string, error) {
	var candidates []string
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if resolved, err := filepath.EvalSymlinks(initdb); err == nil {
			candidates = append(candidates, filepath.Dir(resolved))
		}
		candidates = append(candidates, filepath.Dir(initdb))
	}
	candidates = append(candidates, debianBinDirs()...)
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", ErrNotInstalled
}

// checkBinDir reports whether dir holds initdb and postgres.
func checkBinDir(dir string) error {
	for _, name := range []string{"initdb", "postgres"} {
		if !isExecutable(filepath.Join(dir, name)) {
			return fmt.Errorf("pgtemp: Options.BinDir %q has no executable %s: %w", dir, name, ErrNotInstalled)
		}
	}
	return nil
}

// debianBinDirs returns the directories matching debianBinGlob, newest major
// version first.
func debianBinDirs() []string {
	dirs, _ := filepath.Glob(debianBinGlob)
	version := func(dir string) float64 {
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if err != nil {
			return -1
		}
		return v
	}
	sort.SliceStable(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return dirs
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
