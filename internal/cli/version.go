package cli

import (
	"runtime"
	"runtime/debug"

	ucli "github.com/urfave/cli/v2"
)

// Version returns fleetctl's module version from the build information:
// the module's for 'go install …@version', a pseudo-version naming the
// commit for a build in a git checkout with version control stamping on
// ('make build' asks for it), or "devel" without either.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok || info.Main.Version == "" || info.Main.Version == "(devel)" {
		return "devel"
	}
	return info.Main.Version
}

func (r *runner) versionCommand() *ucli.Command {
	return &ucli.Command{
		Name:        "version",
		Usage:       "print fleetctl's version",
		Description: `JSON: {name, version, go}.`,
		Flags:       []ucli.Flag{outputFlag()},
		Action: r.action(func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if _, err := wantArgs(c); err != nil {
				return err
			}
			if format == formatJSON {
				return writeJSON(r.env.Stdout, versionView{Name: appName, Version: Version(), Go: runtime.Version()})
			}
			r.printf("%s %s (%s)\n", appName, Version(), runtime.Version())
			return nil
		}),
	}
}

// versionView is what version -o json prints. Its JSON form is a stable
// interface.
type versionView struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Go      string `json:"go"`
}
