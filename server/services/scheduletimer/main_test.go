package scheduletimer

import (
	"testing"

	"github.com/worker-gateway/gateway/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }
