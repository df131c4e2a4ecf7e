// @f: Reverie in upstream MLIR (func, arith, math, memref, scf, linalg).
func.func @f(%x: memref<?xf32, strided<[?], offset: ?>>, %tol: memref<f32, strided<[], offset: ?>>, %result0: memref<?xf32>, %result1: memref<f32>, %status: memref<4xi64>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %0 = memref.dim %x, %c0 : memref<?xf32, strided<[?], offset: ?>>
  %N = arith.index_cast %0 : index to i64
  %2 = arith.index_cast %N : i64 to index
  %3 = arith.maxsi %2, %c0 : index
  %cst_f32_1 = arith.constant 0xFF800000 : f32
  %c1 = arith.constant 1 : index
  %cst_f32_3 = arith.constant 0x3F800000 : f32
  %cst_f32_4 = arith.constant 0x40000000 : f32
  %c0_i64 = arith.constant 0 : i64
  %c1000000000_i64 = arith.constant 1000000000 : i64
  %cst_f32_7 = arith.constant 0x3F000000 : f32
  %c1_i64 = arith.constant 1 : i64
  %true = arith.constant true
  %1 = memref.load %tol[] : memref<f32, strided<[], offset: ?>> loc("control_flow.rv":3:1)
  %4 = memref.alloc(%3) : memref<?xf32> loc("control_flow.rv":5:17)
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : memref<?xf32, strided<[?], offset: ?>>) outs(%4 : memref<?xf32>) {
  ^bb0(%5: f32, %6: f32):
    %7 = math.absf %5 : f32 loc("control_flow.rv":5:17)
    linalg.yield %7 : f32
  } loc("control_flow.rv":5:17)
  %10 = scf.for %8 = %c0 to %3 step %c1 iter_args(%9 = %cst_f32_1) -> (f32) {
    %11 = memref.load %4[%8] : memref<?xf32> loc("control_flow.rv":5:13)
    %12 = arith.maximumf %9, %11 : f32 loc("control_flow.rv":5:13)
    scf.yield %12 : f32
  } loc("control_flow.rv":5:13)
  memref.dealloc %4 : memref<?xf32> loc("control_flow.rv":5:13)
  %13 = arith.cmpf ogt, %10, %cst_f32_3 : f32 loc("control_flow.rv":6:8)
  %14 = memref.alloc(%3) : memref<?xf32> loc("control_flow.rv":6:5)
  %15 = scf.if %13 -> (f32) {
    %16 = memref.alloc(%3) : memref<?xf32> loc("control_flow.rv":7:13)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%16 : memref<?xf32>) {
    ^bb0(%17: f32):
      linalg.yield %10 : f32
    } loc("control_flow.rv":7:13)
    %18 = memref.alloc(%3) : memref<?xf32> loc("control_flow.rv":7:13)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x, %16 : memref<?xf32, strided<[?], offset: ?>>, memref<?xf32>) outs(%18 : memref<?xf32>) {
    ^bb0(%19: f32, %20: f32, %21: f32):
      %22 = arith.divf %19, %20 : f32 loc("control_flow.rv":7:13)
      linalg.yield %22 : f32
    } loc("control_flow.rv":7:13)
    memref.dealloc %16 : memref<?xf32> loc("control_flow.rv":7:13)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%18 : memref<?xf32>) outs(%14 : memref<?xf32>) {
    ^bb0(%23: f32, %24: f32):
      linalg.yield %23 : f32
    } loc("control_flow.rv":6:5)
    memref.dealloc %18 : memref<?xf32> loc("control_flow.rv":6:5)
    scf.yield %cst_f32_3 : f32
  } else {
    %25 = memref.alloc(%3) : memref<?xf32> loc("control_flow.rv":10:13)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%25 : memref<?xf32>) {
    ^bb0(%26: f32):
      linalg.yield %cst_f32_4 : f32
    } loc("control_flow.rv":10:13)
    %27 = memref.alloc(%3) : memref<?xf32> loc("control_flow.rv":10:13)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x, %25 : memref<?xf32, strided<[?], offset: ?>>, memref<?xf32>) outs(%27 : memref<?xf32>) {
    ^bb0(%28: f32, %29: f32, %30: f32):
      %31 = arith.mulf %28, %29 : f32 loc("control_flow.rv":10:13)
      linalg.yield %31 : f32
    } loc("control_flow.rv":10:13)
    memref.dealloc %25 : memref<?xf32> loc("control_flow.rv":10:13)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%27 : memref<?xf32>) outs(%14 : memref<?xf32>) {
    ^bb0(%32: f32, %33: f32):
      linalg.yield %32 : f32
    } loc("control_flow.rv":6:5)
    memref.dealloc %27 : memref<?xf32> loc("control_flow.rv":6:5)
    scf.yield %10 : f32
  } loc("control_flow.rv":6:5)
  %34 = memref.alloc(%3) : memref<?xf32> loc("control_flow.rv":12:5)
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%14 : memref<?xf32>) outs(%34 : memref<?xf32>) {
  ^bb0(%35: f32, %36: f32):
    linalg.yield %35 : f32
  } loc("control_flow.rv":12:5)
  %39:3 = scf.while (%37 = %15, %38 = %c0_i64) : (f32, i64) -> (f32, i64, i1) {
    %40 = arith.cmpf ogt, %37, %1 : f32 loc("control_flow.rv":12:11)
    %41 = arith.cmpi slt, %38, %c1000000000_i64 : i64 loc("control_flow.rv":12:5)
    %42 = arith.andi %40, %41 : i1 loc("control_flow.rv":12:5)
    scf.condition(%42) %37, %38, %40 : f32, i64, i1
  } do {
    ^bb0(%43: f32, %44: i64, %45: i1):
    %46 = memref.alloc(%3) : memref<?xf32> loc("control_flow.rv":13:13)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%46 : memref<?xf32>) {
    ^bb0(%47: f32):
      linalg.yield %cst_f32_7 : f32
    } loc("control_flow.rv":13:13)
    %48 = memref.alloc(%3) : memref<?xf32> loc("control_flow.rv":13:13)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%34, %46 : memref<?xf32>, memref<?xf32>) outs(%48 : memref<?xf32>) {
    ^bb0(%49: f32, %50: f32, %51: f32):
      %52 = arith.mulf %49, %50 : f32 loc("control_flow.rv":13:13)
      linalg.yield %52 : f32
    } loc("control_flow.rv":13:13)
    memref.dealloc %46 : memref<?xf32> loc("control_flow.rv":13:13)
    %53 = arith.mulf %43, %cst_f32_7 : f32 loc("control_flow.rv":14:13)
    linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%48 : memref<?xf32>) outs(%34 : memref<?xf32>) {
    ^bb0(%54: f32, %55: f32):
      linalg.yield %54 : f32
    } loc("control_flow.rv":12:5)
    memref.dealloc %48 : memref<?xf32> loc("control_flow.rv":12:5)
    %56 = arith.addi %44, %c1_i64 : i64 loc("control_flow.rv":12:5)
    scf.yield %53, %56 : f32, i64
  } loc("control_flow.rv":12:5)
  %57 = arith.xori %39#2, %true : i1 loc("control_flow.rv":12:5)
  %58 = arith.xori %57, %true : i1 loc("control_flow.rv":12:5)
  scf.if %58 {
    func.call @reverie_fail(%status, %39#1, %c1000000000_i64, %c0_i64) : (memref<4xi64>, i64, i64, i64) -> () loc("control_flow.rv":12:5)
  } loc("control_flow.rv":12:5)
  memref.dealloc %14 : memref<?xf32> loc("control_flow.rv":12:5)
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%34 : memref<?xf32>) outs(%result0 : memref<?xf32>) {
  ^bb0(%59: f32, %60: f32):
    linalg.yield %59 : f32
  } loc("control_flow.rv":3:1)
  memref.store %39#0, %result1[] : memref<f32> loc("control_flow.rv":3:1)
  memref.dealloc %34 : memref<?xf32> loc("control_flow.rv":3:1)
  return
} loc("control_flow.rv":3:1)

// Records the first run-time error of a call: {1, value, bound, site} in %status.
func.func private @reverie_fail(%status: memref<4xi64>, %value: i64, %bound: i64, %site: i64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %failed = memref.load %status[%c0] : memref<4xi64>
  %first = arith.cmpi eq, %failed, %zero : i64
  scf.if %first {
    memref.store %one, %status[%c0] : memref<4xi64>
    memref.store %value, %status[%c1] : memref<4xi64>
    memref.store %bound, %status[%c2] : memref<4xi64>
    memref.store %site, %status[%c3] : memref<4xi64>
  }
  return
}
