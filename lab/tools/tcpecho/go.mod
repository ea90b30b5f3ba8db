module kcpio/tools/tcpecho

go 1.24.0
