package pgtemp

import (
	"fmt"
	"os"
	"strconv"
)

// DefaultMaxConnections is the max_connections a cluster gets when
// [Options.MaxConnections] is zero.
const DefaultMaxConnections = 300

// DefaultRunAsUser is the OS user that runs the server when the calling
// process is root and [Options.RunAsUser] is empty.
const DefaultRunAsUser = "postgres"

// Superuser is the database role clients connect as.
const Superuser = "postgres"

// Options configures [Start]. The zero value is ready to use.
type Options struct {
	// BinDir is the directory holding initdb and postgres. Defaults to the
	// result of [FindBinDir].
	BinDir string

	// BaseDir is the directory in which the cluster's temporary directory is
	// created. Defaults to [os.TempDir]. When the calling process is root,
	// RunAsUser must be able to traverse it.
	BaseDir string

	// Port is the TCP port the server listens on at 127.0.0.1, in
	// [0, 65535]. Defaults to 0, which picks a free port (and retries with
	// another one if it is taken before the server binds it).
	Port int

	// MaxConnections is the server's max_connections, at least 0. Defaults
	// to [DefaultMaxConnections] when 0.
	MaxConnections int

	// RunAsUser is the OS user that runs initdb and postgres when the calling
	// process is root; it is ignored otherwise. Defaults to
	// [DefaultRunAsUser].
	RunAsUser string

	// Settings are extra server settings, passed as -c name=value. They
	// override the defaults (fsync, synchronous_commit and full_page_writes
	// off); listen_addresses, port and unix_socket_directories are reserved.
	Settings map[string]string
}

// reservedSettings are chosen by Start and may not be set through
// Options.Settings.
var reservedSettings = map[string]bool{
	"listen_addresses":        true,
	"port":                    true,
	"unix_socket_directories": true,
}

// withDefaults validates o and returns a copy with every default filled in.
func (o Options) withDefaults() (Options, error) {
	if o.Port < 0 || o.Port > 65535 {
		return o, fmt.Errorf("pgtemp: Options.Port %d out of range [0, 65535]", o.Port)
	}
	if o.MaxConnections < 0 {
		return o, fmt.Errorf("pgtemp: Options.MaxConnections %d must be at least 0", o.MaxConnections)
	}
	for name := range o.Settings {
		if name == "" {
			return o, fmt.Errorf("pgtemp: Options.Settings has an empty setting name")
		}
		if reservedSettings[name] {
			return o, fmt.Errorf("pgtemp: Options.Settings may not set %s; it is chosen by Start", name)
		}
	}
	if o.BinDir == "" {
		dir, err := FindBinDir()
		if err != nil {
			return o, err
		}
		o.BinDir = dir
	} else if err := checkBinDir(o.BinDir); err != nil {
		return o, err
	}
	if o.BaseDir == "" {
		o.BaseDir = os.TempDir()
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.RunAsUser == "" {
		o.RunAsUser = DefaultRunAsUser
	}
	settings := map[string]string{
		"fsync":              "off",
		"synchronous_commit": "off",
		"full_page_writes":   "off",
		"max_connections":    strconv.Itoa(o.MaxConnections),
	}
	for name, value := range o.Settings {
		settings[name] = value
	}
	o.Settings = settings
	return o, nil
}
