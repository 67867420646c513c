// vm tests
