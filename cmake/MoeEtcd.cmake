# etcd v3's API for the controller's etcd store (--store etcd://...): Debian's etcd does not ship its
# .proto files in a C++ package, so scripts/fetch-etcd-protos.sh takes them out of Debian's
# golang-etcd-server-dev (downloaded, not installed) into a cache outside the tree, once; a warm cache
# configures offline. A machine with its own copy points at it instead (the folder that holds
# etcd/etcdserver/etcdserverpb/rpc.proto): -DMOE_ETCD_PROTO_DIR=/opt/etcd-protos
# Defines moe_etcd_proto (etcdserverpb, mvccpb, authpb; include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h").
set(MOE_ETCD_PROTO_DIR "" CACHE PATH "the folder holding etcd/etcdserver/etcdserverpb/rpc.proto; empty: fetched")
if(MOE_ETCD_PROTO_DIR STREQUAL "")
  execute_process(COMMAND ${PROJECT_SOURCE_DIR}/scripts/fetch-etcd-protos.sh
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "moe: scripts/fetch-etcd-protos.sh failed (the controller's etcd store needs etcd's "
                        ".proto files; point -DMOE_ETCD_PROTO_DIR at a copy): ${err}")
  endif()
  set(moe_etcd_dir "${out}")
else()
  set(moe_etcd_dir "${MOE_ETCD_PROTO_DIR}")
endif()
set(moe_etcd_protos etcd/mvcc/mvccpb/kv.proto etcd/auth/authpb/auth.proto etcd/etcdserver/etcdserverpb/rpc.proto)
set(moe_etcd_srcs)
foreach(proto ${moe_etcd_protos})
  if(NOT EXISTS "${moe_etcd_dir}/${proto}")
    message(FATAL_ERROR "moe: ${moe_etcd_dir}/${proto} is missing (MOE_ETCD_PROTO_DIR)")
  endif()
  string(REGEX REPLACE "\\.proto$" "" base ${proto})
  set(gen ${PROJECT_BINARY_DIR}/${base}.pb.cc ${PROJECT_BINARY_DIR}/${base}.pb.h
          ${PROJECT_BINARY_DIR}/${base}.grpc.pb.cc ${PROJECT_BINARY_DIR}/${base}.grpc.pb.h)
  add_custom_command(
    OUTPUT ${gen}
    COMMAND ${Protobuf_PROTOC_EXECUTABLE} --proto_path=${moe_etcd_dir} --cpp_out=${PROJECT_BINARY_DIR}
            --grpc_out=${PROJECT_BINARY_DIR} --plugin=protoc-gen-grpc=${MOE_GRPC_CPP_PLUGIN} ${proto}
    DEPENDS ${moe_etcd_dir}/${proto}
    WORKING_DIRECTORY ${moe_etcd_dir}
    COMMENT "protoc ${proto} (etcd's API)")
  list(APPEND moe_etcd_srcs ${PROJECT_BINARY_DIR}/${base}.pb.cc ${PROJECT_BINARY_DIR}/${base}.grpc.pb.cc)
endforeach()
add_library(moe_etcd_proto STATIC ${moe_etcd_srcs})
target_include_directories(moe_etcd_proto SYSTEM PUBLIC ${PROJECT_BINARY_DIR})
target_link_libraries(moe_etcd_proto PUBLIC protobuf::libprotobuf PkgConfig::GRPCPP)
message(STATUS "moe: etcd API from ${moe_etcd_dir}")
