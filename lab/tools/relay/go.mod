module kcpio/tools/relay

go 1.24.0
