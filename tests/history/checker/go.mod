module chatroom/tests/history/checker

go 1.19
