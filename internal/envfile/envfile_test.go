package envfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	vars, err := Parse(strings.NewReader("# Written by `make run`\n\nGATEWAY_URL=https://127.0.0.1:8443\n" +
		"export GATEWAY_TOKEN='tok=en'\n  CA_CERT = \"/x/ca.pem\"  \nEMPTY=\nODD='x\"\nGATEWAY_URL=later\n"))
	require.NoError(t, err)
	require.Equal(t, Vars{
		{"GATEWAY_URL", "https://127.0.0.1:8443"},
		{"GATEWAY_TOKEN", "tok=en"},
		{"CA_CERT", "/x/ca.pem"},
		{"EMPTY", ""},
		{"ODD", `'x"`},
		{"GATEWAY_URL", "later"},
	}, vars)
	v, ok := vars.Lookup("GATEWAY_URL")
	require.True(t, ok)
	require.Equal(t, "later", v, "the last line of a key wins, as in a shell")
	_, ok = vars.Lookup("MISSING")
	require.False(t, ok)
	require.Equal(t, "tok=en", vars.Get("GATEWAY_TOKEN"))
}

func TestParseRejectsMalformedLines(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"nonsense\n", "=value\n", "A=1\nexport \n"} {
		_, err := Parse(strings.NewReader(text))
		require.ErrorContains(t, err, "want KEY=value", "%q", text)
	}
	_, err := Parse(strings.NewReader("A=1\n\nB\n"))
	require.EqualError(t, err, "line 3: want KEY=value")
}

func TestRead(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "env")
	require.NoError(t, os.WriteFile(path, []byte("A=1\nB\n"), 0o600))
	_, err := Read(path)
	require.EqualError(t, err, path+": line 2: want KEY=value")
	_, err = Read(filepath.Join(t.TempDir(), "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestEncodeRoundTrips: what Encode writes, Parse reads back unchanged.
func TestEncodeRoundTrips(t *testing.T) {
	t.Parallel()
	vars := Vars{{"PLAIN", "/a/b-c.pem"}, {"SPACED", "a b"}, {"EMPTY", ""}, {"QUOTE", `say "hi"`}, {"URL", "postgres://u@h:5/d?x=1&y=2"}}
	b, err := Encode(vars)
	require.NoError(t, err)
	require.Equal(t, "export PLAIN=/a/b-c.pem\nexport SPACED='a b'\nexport EMPTY=''\nexport QUOTE='say \"hi\"'\n"+
		"export URL='postgres://u@h:5/d?x=1&y=2'\n", string(b))
	back, err := Parse(strings.NewReader(string(b)))
	require.NoError(t, err)
	require.Equal(t, vars, back)

	for _, bad := range []string{"it's", "two\nlines", "cr\r"} {
		_, err := Encode(Vars{{"K", bad}})
		require.Error(t, err, "%q", bad)
	}
}
