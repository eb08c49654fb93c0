package sandbox

import "flag"

// Flags registers the sandbox's flags on fs, writing into c; the other
// settings (read_only_paths, the limits) live in the config file's sandbox
// section. Each flag is checked as it is set.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.Var(modeFlag{&c.Mode}, "sandbox", "`mode` of run_command's sandbox: auto (enforce what the kernel offers), required (refuse to start without all of it) or off (unsafe) (default auto)")
	fs.Var(networkFlag{&c.Network}, "sandbox-network", "`access` of sandboxed commands to the network: deny or allow (default deny)")
	fs.Var(uidRangeFlag{&c.UIDRange}, "sandbox-uid-range", "`FIRST-LAST`: with --workspace-per-session, a uid and gid of its own for each session's folder and commands, from this range (needs root, or CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER and CAP_KILL)")
}

// uidRangeFlag is the value of --sandbox-uid-range.
type uidRangeFlag struct{ r *string }

func (f uidRangeFlag) String() string {
	if f.r == nil {
		return ""
	}
	return *f.r
}

func (f uidRangeFlag) Set(s string) error {
	*f.r = s
	_, err := ParseUIDRange(s)
	return err
}

// modeFlag is the value of --sandbox.
type modeFlag struct{ mode *Mode }

func (f modeFlag) String() string {
	if f.mode == nil {
		return ""
	}
	return string(*f.mode)
}

func (f modeFlag) Set(s string) error {
	*f.mode = Mode(s)
	return Config{Mode: *f.mode}.Validate()
}

// networkFlag is the value of --sandbox-network.
type networkFlag struct{ network *string }

func (f networkFlag) String() string {
	if f.network == nil {
		return ""
	}
	return *f.network
}

func (f networkFlag) Set(s string) error {
	*f.network = s
	return Config{Network: s}.Validate()
}
