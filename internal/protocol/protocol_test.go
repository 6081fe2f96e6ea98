package protocol

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSupported(t *testing.T) {
	require.True(t, Supported(Current), "this release's runtime")
	require.True(t, Supported(Oldest), "the oldest served")
	newer, older := strconv.Itoa(number(Current)+1), strconv.Itoa(number(Oldest)-1)
	for _, v := range []string{newer, older, "", "-1", "+" + Current, "0" + Current, Current + ".0", " " + Current, "v" + Current,
		"99999999999999999999"} {
		require.False(t, Supported(v), "%q", v)
	}
}
