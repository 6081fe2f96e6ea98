package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFromBuild(t *testing.T) {
	t.Parallel()
	recorded := &debug.BuildInfo{GoVersion: "go1.27.3",
		Main: debug.Module{Path: "github.com/worker-gateway/gateway", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "aaaa"}, {Key: "vcs.modified", Value: "true"},
			{Key: "vcs.time", Value: "2026-12-01T22:00:00Z"}, {Key: "-tags", Value: "devstack,failpoints"}}}

	// Nothing stamped: what the go command recorded.
	require.Equal(t, Info{Version: "(devel)", Revision: "aaaa", Modified: true, Time: "2026-12-01T22:00:00Z",
		Module: "github.com/worker-gateway/gateway", Tags: "devstack failpoints", GoVersion: "go1.27.3"},
		fromBuild(recorded, "", ""))

	// Stamped (an image build, no .git): the stamp wins.
	got := fromBuild(recorded, "v0.3.0-2-gbbbb", "bbbb")
	require.Equal(t, "v0.3.0-2-gbbbb", got.Version)
	require.Equal(t, "bbbb", got.Revision)
	require.False(t, got.Modified)
	require.Empty(t, got.Time)
	require.True(t, fromBuild(recorded, "v0.3.0-dirty", "aaaa").Modified)

	// No build information at all.
	require.Equal(t, Info{Version: "v1", Revision: "cccc"}, fromBuild(nil, "v1", "cccc"))
	require.Equal(t, "(devel)", fromBuild(nil, "", "").Version)
}
